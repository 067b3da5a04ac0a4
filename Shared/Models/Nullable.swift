/// An optional field that is always in the JSON, `null` when unset, where a synthesized `Encodable`
/// leaves an unset optional out: for answers whose shape does not change with their state (the
/// documents require these fields). Every JSON writer writes it the same way, since the field
/// encodes itself. A missing key decodes as unset, as for a plain optional.
@propertyWrapper
public struct Nullable<Value> {
    public var wrappedValue: Value?

    public init(wrappedValue: Value?) {
        self.wrappedValue = wrappedValue
    }
}

extension Nullable: Sendable where Value: Sendable {}
extension Nullable: Equatable where Value: Equatable {}
extension Nullable: Hashable where Value: Hashable {}

extension Nullable: Encodable where Value: Encodable {
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let wrappedValue { try container.encode(wrappedValue) } else { try container.encodeNil() }
    }
}

extension Nullable: Decodable where Value: Decodable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        wrappedValue = container.decodeNil() ? nil : try container.decode(Value.self)
    }
}

extension KeyedDecodingContainer {
    /// What synthesized `Decodable` code calls for a `@Nullable` field: a missing key is unset.
    public func decode<Value: Decodable>(_ type: Nullable<Value>.Type, forKey key: Key) throws -> Nullable<Value> {
        Nullable(wrappedValue: try decodeIfPresent(Value.self, forKey: key))
    }
}
