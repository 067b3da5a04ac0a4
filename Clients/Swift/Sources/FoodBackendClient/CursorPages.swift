import FoodBackendAPI
import Foundation

/// A list the server gives in pages (`items` and `next_cursor`) as one sequence of its items: the
/// next page is asked for when the last item of the one before has been read, and never after a
/// page without a cursor.
public struct CursorPages<Item: Sendable>: AsyncSequence, Sendable {
    public typealias Element = Item
    public typealias Fetch = @Sendable (_ cursor: String?) async throws -> (items: [Item], nextCursor: String?)

    let fetch: Fetch

    public init(_ fetch: @escaping Fetch) {
        self.fetch = fetch
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let fetch: Fetch
        var buffer: [Item] = []
        var index = 0
        var cursor: String?
        var finished = false

        public mutating func next() async throws -> Item? {
            while index == buffer.count {
                if finished { return nil }
                let page = try await fetch(cursor)
                buffer = page.items
                index = 0
                cursor = page.nextCursor
                // A page with a cursor but no items would otherwise be asked for forever.
                finished = page.nextCursor == nil || page.items.isEmpty
            }
            defer { index += 1 }
            return buffer[index]
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(fetch: fetch)
    }
}

extension FoodBackend {
    /// `CursorPages` over a generated list operation: `fetch` asks for one page with the cursor and
    /// returns its items and `next_cursor`.
    public func pages<Item: Sendable>(_ fetch: @escaping @Sendable (Client, _ cursor: String?) async throws -> (items: [Item], nextCursor: String?))
        -> CursorPages<Item>
    {
        CursorPages { cursor in try await self.send { try await fetch($0, cursor) } }
    }
}
