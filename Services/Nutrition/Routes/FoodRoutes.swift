import Foundation
import Hummingbird
import ServiceKit

/// The food composition table, searched by anyone signed in: what the app's edit screen offers
/// when the user changes "rice" to "brown rice", and what analysed items are matched with.
struct FoodRoutes {
    let nutrition: Nutrition

    func add(to router: Router<ServiceRequestContext>) {
        let foods = router.group("v1/foods", context: AuthenticatedContext.self)
        foods.get(use: list)
        foods.get(":ndb_number", use: food)
    }

    static let notFound = APIError.notFound("No such food.", code: "food_not_found")
    static let maxQuery = 100

    /// What a search's response is kept by: the query as matched (case and spacing aside) and the page.
    struct SearchKey: Hashable, Sendable {
        var query: String
        var limit: Int
        var cursor: String?
    }

    /// `?q=` (required) matched against USDA's descriptions with plurals, word forms and typos; the
    /// best matches first. Answered from `Nutrition.foodSearches` when this process has answered it.
    @Sendable func list(_ request: Request, context: AuthenticatedContext) async throws -> EncodedJSON {
        let page = try PageRequest(query: request)
        let query = request.uri.queryParameters["q"].map { String($0).trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
        if query.isEmpty || query.codePoints > Self.maxQuery || query.hasInvisibleCharacters() {
            throw APIError.validation([.init(field: "q", message: "must be 1 to \(Self.maxQuery) characters, without control characters")])
        }
        let words = query.lowercased().split(whereSeparator: \.isWhitespace).joined(separator: " ")
        let after = try page.position(FoodCursor.self)
        if let after, after.query != words {
            throw APIError(
                .badRequest, code: "invalid_cursor", detail: "This cursor belongs to another search; start from the first page.",
                errors: [.init(field: "cursor", message: "is not a cursor this search returned")])
        }
        let nutrition = self.nutrition
        func search() async throws -> EncodedJSON {
            let rows = try await nutrition.postgres.withConnectionOnItsLoop { connection in
                try await nutrition.foods.search(
                    query, limit: page.limit + 1, after: after, minimumCoverage: FoodStore.minimumCoverage, on: connection, logger: context.logger)
            }
            let (items, next) = Cursor.page(rows, limit: page.limit) {
                FoodCursor(rank: $0.rank, description: $0.food.description, ndbNumber: $0.food.ndbNumber, query: words)
            }
            return try EncodedJSON(Page(items: items.map { FoodView($0.food) }, nextCursor: next))
        }
        guard let kept = nutrition.foodSearches else { return try await search() }
        return try await kept.value(for: SearchKey(query: words, limit: page.limit, cursor: page.cursor), version: FoodTable.version, orMake: search)
    }

    @Sendable func food(_ request: Request, context: AuthenticatedContext) async throws -> FoodView {
        let number = context.parameters.get("ndb_number") ?? ""
        guard (1...16).contains(number.utf8.count), number.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { throw Self.notFound }
        let nutrition = self.nutrition
        let found = try await nutrition.postgres.withConnectionOnItsLoop { connection in
            try await nutrition.foods.find(number, on: connection, logger: context.logger)
        }
        guard let found else { throw Self.notFound }
        return FoodView(found)
    }
}
