// The seeded generator and the tone detector the tests share with the simulator.
@_exported import TestingPrimitives
