import Foundation

/// Refuses a key a nested object does not take, naming it (`blocks[0].sets[1].repz`), as the
/// kit refuses one at the top level of a `StrictJSONBody`.
public enum StrictKeys {
    struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    public static func check<Keys: CodingKey & CaseIterable>(_ decoder: any Decoder, _: Keys.Type, what: String) throws {
        let container = try decoder.container(keyedBy: AnyKey.self)
        let known = Set(Keys.allCases.map(\.stringValue))
        if let unknown = container.allKeys.map(\.stringValue).sorted().first(where: { !known.contains($0) }) {
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath + [AnyKey(stringValue: unknown)], debugDescription: "is not a field of \(what); its fields are \(known.sorted().joined(separator: ", "))"))
        }
    }
}
