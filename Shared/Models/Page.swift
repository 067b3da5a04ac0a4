/// One page of a cursor-paginated list: `items` and the cursor of the next page, `nil` on the last.
/// `next_cursor` is always written, null on the last page: clients generated from the documents
/// expect the key.
public struct Page<Item: Codable & Sendable>: Codable, Sendable {
    public var items: [Item]
    @Nullable package var nextCursor: String?

    public init(items: [Item], nextCursor: String?) {
        self.items = items
        self.nextCursor = nextCursor
    }

    enum CodingKeys: String, CodingKey {
        case items, nextCursor = "next_cursor"
    }
}
