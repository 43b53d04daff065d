import Testing
@testable import Signaling
