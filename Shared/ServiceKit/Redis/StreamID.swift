import ServiceKitCore

/// A Redis stream entry id, `<milliseconds>-<sequence>`, compared as the two numbers it is: compared
/// as text, `9-1` would come after `10-0`.
public struct StreamID: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var milliseconds: UInt64
    public var sequence: UInt64

    public init(milliseconds: UInt64, sequence: UInt64) {
        self.milliseconds = milliseconds
        self.sequence = sequence
    }

    /// Exactly `<digits>-<digits>`, each a 64-bit number; nil for anything else. Ids come back from
    /// clients (`Last-Event-ID`), so nothing looser is taken: not Redis's shorthands (`5`, `-`, `+`).
    public init?(_ text: some StringProtocol) {
        let parts = text.utf8.split(separator: UInt8(ascii: "-"), maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 2, let milliseconds = Self.number(parts[0]), let sequence = Self.number(parts[1]) else { return nil }
        self.init(milliseconds: milliseconds, sequence: sequence)
    }

    private static func number(_ digits: some Collection<UInt8>) -> UInt64? {
        guard !digits.isEmpty, digits.count <= 20 else { return nil }
        var value: UInt64 = 0
        for digit in digits {
            guard digit >= UInt8(ascii: "0"), digit <= UInt8(ascii: "9") else { return nil }
            let (times10, overflowA) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflowB) = times10.addingReportingOverflow(UInt64(digit - UInt8(ascii: "0")))
            guard !overflowA, !overflowB else { return nil }
            value = sum
        }
        return value
    }

    /// The last id of the millisecond before `milliseconds`: every entry added from that millisecond
    /// on comes after it.
    package static func justBefore(milliseconds: UInt64) -> StreamID {
        milliseconds == 0 ? StreamID(milliseconds: 0, sequence: 0) : StreamID(milliseconds: milliseconds - 1, sequence: .max)
    }

    public var description: String { "\(milliseconds)-\(sequence)" }

    public static func < (a: StreamID, b: StreamID) -> Bool {
        (a.milliseconds, a.sequence) < (b.milliseconds, b.sequence)
    }
}
