import Foundation

/// The random numbers of a randomised test: SplitMix64 from a seed that the test prints, so a
/// failure can be repeated with `TEST_SEED=<seed> scripts/test --filter <test>`. Without `TEST_SEED`
/// each run draws a new seed.
public struct SeededRandom: RandomNumberGenerator, Sendable {
    public let seed: UInt64
    private var state: UInt64

    /// Prints `<name>: seed <n> (TEST_SEED=<n> repeats it)`.
    public init(_ name: String, environment: [String: String] = ProcessInfo.processInfo.environment) {
        let seed = environment["TEST_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 0...UInt64.max)
        print("\(name): seed \(seed) (TEST_SEED=\(seed) repeats it)")
        self.seed = seed
        state = seed
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
