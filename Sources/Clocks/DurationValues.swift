extension Duration {
    /// The duration in seconds as a floating-point value.
    public var seconds: Double {
        let (s, a) = components
        return Double(s) + Double(a) / 1e18
    }

    /// Whole milliseconds (frame lengths are), rounded towards zero.
    package var milliseconds: Int64 { components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000 }

    /// Whole nanoseconds, rounded towards zero.
    package var nanoseconds: Int64 { components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000 }
}
