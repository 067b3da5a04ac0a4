/// A string field of an event with a known set of values, which later releases may extend (events
/// are only ever extended). The known values are cases; a value this release does not know decodes
/// as the type's `unknown` case and encodes back unchanged, so an event from a newer producer neither
/// fails to decode nor changes on its way. Equality and hashing go by the text, so `unknown("left")`
/// and `left` are one value. On the wire it is the plain string.
public protocol EventVocabulary: RawRepresentable, Codable, Hashable, Sendable where RawValue == String {
    init(rawValue: String)
}

extension EventVocabulary {
    public init(from decoder: any Decoder) throws {
        self.init(rawValue: try decoder.singleValueContainer().decode(String.self))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    public static func == (a: Self, b: Self) -> Bool { a.rawValue == b.rawValue }

    public func hash(into hasher: inout Hasher) { hasher.combine(rawValue) }
}
