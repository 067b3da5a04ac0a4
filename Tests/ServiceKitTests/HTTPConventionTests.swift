import Foundation
import Hummingbird
import HummingbirdTesting
import Models
import NIOCore
import PostgresNIO
@testable import ServiceKit
@testable import ServiceKitCore
@testable import ServiceKitDatabase
@testable import ServiceKitEvents
@testable import ServiceKitHTTP
@testable import ServiceKitRedis
@testable import ServiceKitTokens
import Testing
import TestSupport

/// Problems, decoding, request ids and pagination through the real router.
@Suite struct HTTPConventionTests {
    struct CreateRequest: Decodable {
        var name: String
        var count: Int
        var tags: [String]?
        var nested: Nested?
        struct Nested: Decodable { var when: Date }
    }

    struct Item: Codable, Sendable { var id: Int }

    static func app() -> some ApplicationProtocol {
        let router = Router(context: ServiceRequestContext.self)
        router.add(middleware: TelemetryMiddleware(metrics: HTTPMetrics(registry: MetricsRegistry())))
        router.add(middleware: ProblemMiddleware())
        router.post("things") { request, context -> String in
            let body = try await request.decode(as: CreateRequest.self, context: context)
            return "\(body.name) x\(body.count)"
        }
        router.get("boom") { _, _ -> String in
            struct Secret: Error { var password = "hunter2" }
            throw Secret()
        }
        router.get("items") { request, _ -> Response in
            let page = try PageRequest(query: request)
            let after = try page.position(Int.self) ?? 0
            let rows = Array((after + 1)...(after + page.limit + 1)).filter { $0 <= 45 }.map { Item(id: $0) }
            let result = Cursor.page(rows, limit: page.limit) { $0.id }
            return try jsonResponse(Page(items: result.items, nextCursor: result.nextCursor))
        }
        return Application(router: router)
    }

    func problem(_ response: TestResponse) throws -> Problem {
        #expect(response.headers[.contentType] == Problem.mediaType)
        return try JSONDecoder.api.decode(Problem.self, from: Data(buffer: response.body))
    }

    @Test func decodingErrorsNameTheField() async throws {
        try await Self.app().test(.router) { client in
            func post(_ body: String, contentType: String = "application/json") async throws -> TestResponse {
                try await client.execute(uri: "/things", method: .post, headers: [.contentType: contentType], body: ByteBuffer(string: body))
            }
            #expect(try await post(#"{"name":"a","count":2}"#).body == ByteBuffer(string: "a x2"))

            let missing = try problem(try await post(#"{"name":"a"}"#))
            #expect(missing.status == 400 && missing.code == "validation_failed")
            #expect(missing.errors == [.init(field: "count", message: "is required")])

            let wrongType = try problem(try await post(#"{"name":"a","count":"two"}"#))
            #expect(wrongType.errors == [.init(field: "count", message: "must be a number")])

            let nested = try problem(try await post(#"{"name":"a","count":1,"nested":{"when":"yesterday"}}"#))
            #expect(nested.errors?.first?.field == "nested.when")

            let arrayItem = try problem(try await post(#"{"name":"a","count":1,"tags":["x",3]}"#))
            #expect(arrayItem.errors?.first?.field == "tags[1]")

            let malformed = try problem(try await post(#"{"name": "a", "#))
            #expect(malformed.code == "malformed_json")

            let empty = try problem(try await post(""))
            #expect(empty.code == "malformed_json")

            let notJSON = try problem(try await post("name=a", contentType: "application/x-www-form-urlencoded"))
            #expect(notJSON.status == 415)
        }
    }

    @Test func oversizedBodiesAre413() async throws {
        try await Self.app().test(.router) { client in
            let big = "{\"name\":\"" + String(repeating: "x", count: 3 * 1024 * 1024) + "\",\"count\":1}"
            let response = try await client.execute(uri: "/things", method: .post, headers: [.contentType: "application/json"], body: ByteBuffer(string: big))
            #expect(response.status == .contentTooLarge)
            #expect(try problem(response).code == "payload_too_large")
        }
    }

    @Test func unexpectedErrorsAre500WithoutInternals() async throws {
        try await Self.app().test(.router) { client in
            let response = try await client.execute(uri: "/boom", method: .get, headers: [.requestID: "req-42"])
            #expect(response.status == .internalServerError)
            let body = String(buffer: response.body)
            #expect(!body.contains("hunter2") && !body.contains("Secret"))
            #expect(try problem(response).requestID == "req-42")
        }
    }

    @Test func requestIDsAreKeptOrMade() async throws {
        try await Self.app().test(.router) { client in
            let given = try await client.execute(uri: "/nowhere", method: .get, headers: [.requestID: "abc-123"])
            #expect(given.headers[.requestID] == "abc-123")
            #expect(try problem(given).code == "not_found")
            let made = try await client.execute(uri: "/nowhere", method: .get)
            #expect(UUID(uuidString: made.headers[.requestID] ?? "") != nil)
            let hostile = try await client.execute(uri: "/nowhere", method: .get, headers: [.requestID: String(repeating: "x", count: 500)])
            #expect(hostile.headers[.requestID]?.count == 36)
            // An app's `UUID().uuidString` comes back as it was sent, in the body as in the header,
            // though identifiers the kit writes are lowercase.
            let upper = UUID().uuidString
            let fromAnApp = try await client.execute(uri: "/nowhere", method: .get, headers: [.requestID: upper])
            #expect(fromAnApp.headers[.requestID] == upper)
            #expect(try problem(fromAnApp).requestID == upper)
        }
    }

    /// Made ids are version-4 UUIDs in lowercase, and none repeats, however many requests a process serves.
    @Test func madeRequestIDsAreDistinctVersion4UUIDs() {
        var seen = Set<String>()
        for _ in 0..<200_000 {
            let id = RequestIDs.next()
            guard let uuid = UUID(uuidString: id) else { Issue.record("not a UUID: \(id)"); return }
            #expect(id == id.lowercased() && id.count == 36)
            #expect(uuid.uuid.6 >> 4 == 4 && uuid.uuid.8 >> 6 == 0b10, "version 4, RFC 9562 variant: \(id)")
            seen.insert(id)
        }
        #expect(seen.count == 200_000)
        // The scrambling is a bijection on 62 bits (the variant takes the other two), so counters within
        // 2^62 of each other never meet; spot-check known values and that it stays within 62 bits.
        #expect(RequestIDs.scramble(0) == 0)
        #expect(RequestIDs.scramble(1) == 0x2380_F76D_FA2E_C705)
        #expect(RequestIDs.scramble(1 << 62 | 1) == RequestIDs.scramble(1))
        #expect((0..<10_000).allSatisfy { RequestIDs.scramble(UInt64.max - $0) >> 62 == 0 })
        #expect(RequestIDs.format(high: 0x0123_4567_89AB_4DEF, low: 0x8EDC_BA98_7654_3210) == "01234567-89ab-4def-8edc-ba9876543210")
    }

    /// Request metrics keep counting per method, route and status with their instruments made once.
    @Test func requestMetricsCountEachLabelSet() {
        let registry = MetricsRegistry()
        let metrics = HTTPMetrics(registry: registry)
        for _ in 0..<3 { metrics.record(method: "GET", route: "/v1/items/:id", status: 200, duration: .milliseconds(3)) }
        metrics.record(method: "GET", route: "/v1/items/:id", status: 404, duration: .milliseconds(1))
        metrics.record(method: "POST", route: "/v1/items", status: 201, duration: .milliseconds(20))
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        let text = String(decoding: buffer, as: UTF8.self)
        #expect(text.contains(#"http_requests_total{method="GET",route="/v1/items/:id",status="200"} 3"#), "\(text)")
        #expect(text.contains(#"http_requests_total{method="GET",route="/v1/items/:id",status="404"} 1"#))
        #expect(text.contains(#"http_requests_total{method="POST",route="/v1/items",status="201"} 1"#))
        #expect(text.contains(#"http_request_duration_seconds_count{method="GET",route="/v1/items/:id"} 4"#))
    }

    /// `UUIDText` reads and writes what Foundation's parser and `uuidString` do, and refuses the rest.
    @Test func uuidsParseAsFoundationParsesThem() {
        for _ in 0..<2_000 {
            let uuid = UUID()
            #expect(UUID(parsing: uuid.uuidString) == uuid)
            #expect(UUID(parsing: uuid.uuidString.lowercased()) == uuid)
            let (high, low) = uuid.halves
            #expect(UUID(high: high, low: low) == uuid)
            let text = String(unsafeUninitializedCapacity: 36) {
                UUIDText.write(high: high, low: low, uppercase: true, into: $0); return 36
            }
            #expect(text == uuid.uuidString)
        }
        #expect(UUID(parsing: "00000000-0000-0000-0000-000000000000") == UUID(uuidString: "00000000-0000-0000-0000-000000000000"))
        #expect(UUID(parsing: "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF") == UUID(uuidString: "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF"))
        #expect(UUID(parsing: "01234567-89ab-cdef-0123-456789ABCDEF")?.uuidString == "01234567-89AB-CDEF-0123-456789ABCDEF")
        for bad in [
            "", "me", "0123456789abcdef0123456789abcdef", "01234567-89ab-cdef-0123-456789abcde", "01234567-89ab-cdef-0123-456789abcdef0",
            "01234567-89ab-cdef-0123_456789abcdef", "0123456g-89ab-cdef-0123-456789abcdef", "01234567-89ab-cdef-0123-456789abcdé",
            "{1234567-89ab-cdef-0123-456789abcdef}", " 1234567-89ab-cdef-0123-456789abcdef", "+1234567-89ab-cdef-0123-456789abcdef",
        ] {
            #expect(UUID(parsing: bad) == nil, "\(bad)")
        }
    }

    /// Cursors are base64url without padding, read back (a date at the microsecond PostgreSQL keeps),
    /// and a cursor a client kept from before is still read.
    @Test func cursorsAreURLSafeAndRoundTrip() throws {
        struct Key: Codable, Equatable { var at: Date; var id: UUID; var text: String }
        for length in 0..<12 {
            // Bytes that base64 writes with `+`, `/` and padding.
            let key = Key(at: Date(timeIntervalSince1970: 1_795_000_000.123456 + Double(length)), id: UUID(), text: String(repeating: "\u{FB}\u{FF}?>", count: length))
            let cursor = Cursor.encode(key)
            #expect(cursor.allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }, "\(cursor)")
            let previous = try JSONEncoder().encode(key).base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            for read in [Cursor.decode(Key.self, from: cursor), Cursor.decode(Key.self, from: previous)] {
                #expect(read?.id == key.id && read?.text == key.text)
                #expect(read.map { abs($0.at.timeIntervalSince(key.at)) < 0.000_001 } == true)
                #expect(read.map { Self.bound($0.at) } == 848_315_200_123_456 + Int64(length) * 1_000_000)
            }
        }
        #expect(Cursor.decode(Key.self, from: "not a cursor") == nil)
        #expect(Cursor.decode(Key.self, from: "e30") == nil)  // `{}`
    }

    /// A page starts after its cursor's row: the time read from PostgreSQL, kept in the cursor, is
    /// bound again at the microsecond it was read at (bound as the `Double` came, about half fell a
    /// microsecond short, and the rows sharing that time with a lower id were skipped).
    @Test func aCursorsTimeIsBoundAsItWasRead() throws {
        struct Key: Codable { var at: Date; var id: Int }
        var generator = SeededRandom("aCursorsTimeIsBoundAsItWasRead")
        var stored: [Int64] = (0..<1000).map { 848_315_200_000_000 + Int64($0) * 1000 }
        for _ in 0..<3000 { stored.append(Int64.random(in: -2_147_000_000_000_000..<2_147_000_000_000_000, using: &generator)) }
        for microseconds in stored {
            var row = ByteBuffer()
            row.writeInteger(microseconds)
            let read = try Date(from: &row, type: .timestamptz, format: .binary, context: .default)
            let key = try #require(Cursor.decode(Key.self, from: Cursor.encode(Key(at: read, id: 7))))
            #expect(Self.bound(key.at) == microseconds, "\(microseconds)")
        }
    }

    /// The microseconds since 2000 PostgresNIO binds for a date.
    static func bound(_ date: Date) -> Int64? {
        var buffer = ByteBuffer()
        date.encode(into: &buffer, context: PostgresEncodingContext.default)
        return buffer.readInteger(as: Int64.self)
    }

    @Test func cursorPaginationWalksTheWholeList() async throws {
        try await Self.app().test(.router) { client in
            var cursor: String?
            var seen: [Int] = []
            repeat {
                let uri = "/items?limit=20" + (cursor.map { "&cursor=\($0)" } ?? "")
                let page = try JSONDecoder.api.decode(Page<Item>.self, from: Data(buffer: try await client.execute(uri: uri, method: .get).body))
                seen += page.items.map(\.id)
                cursor = page.nextCursor
            } while cursor != nil
            #expect(seen == Array(1...45))
            #expect(try await client.execute(uri: "/items?limit=0", method: .get).status == .badRequest)
            #expect(try await client.execute(uri: "/items?limit=101", method: .get).status == .badRequest)
            #expect(try problem(try await client.execute(uri: "/items?cursor=%%%", method: .get)).errors?.first?.field == "cursor")
        }
    }
}

/// A path served under other methods is `405` with `Allow` (RFC 9110 §15.5.6), not the router's 404.
@Suite struct MethodNotAllowedTests {
    @Test func aMethodAPathDoesNotHaveIs405WithAllow() async throws {
        let router = Router(context: ServiceRequestContext.self)
        let index = RouteIndex()
        router.add(middleware: ProblemMiddleware())
        router.add(middleware: MethodNotAllowedMiddleware(index: index))
        router.get("things/{id}") { _, _ in "thing" }
        router.delete("things/{id}") { _, _ in HTTPResponse.Status.noContent }
        router.get("missing/{id}") { _, _ -> String in throw APIError(.notFound, code: "not_found", detail: "No such thing.") }
        router.get("files/**") { _, _ in "file" }
        router.put("things/mine") { _, _ in "mine" }
        router.delete("things/mine/notes/{id}") { _, _ in HTTPResponse.Status.noContent }
        router.get("things/{id}/notes") { _, _ in "notes" }
        index.record(router)
        #expect(
            Set(index.routes.map(\.description)) == [
                "GET /things/{id}", "DELETE /things/{id}", "GET /missing/{id}", "GET /files/**", "PUT /things/mine",
                "DELETE /things/mine/notes/{id}", "GET /things/{id}/notes",
            ])
        try await Application(router: router).test(.router) { client in
            for method in [HTTPRequest.Method.put, .post, .patch, HTTPRequest.Method(rawValue: "TRACE")!] {
                let response = try await client.execute(uri: "/things/42", method: method)
                #expect(response.status == .methodNotAllowed, "\(method)")
                #expect(response.headers[.allow] == "DELETE, GET", "\(method)")
                #expect(try JSONDecoder.api.decode(Problem.self, from: Data(buffer: response.body)).code == "method_not_allowed")
            }
            #expect(try await client.execute(uri: "/files/a/b/c", method: .post).headers[.allow] == "GET")
            // The constant segment wins over the capture, as in the router: only PUT is allowed.
            #expect(try await client.execute(uri: "/things/mine", method: .get).headers[.allow] == "PUT")
            // A path that ends on a node that only leads further (things/mine/notes/{id}) is the
            // router's 404 for every method, not a 405 naming the capture's methods.
            #expect(try await client.execute(uri: "/things/mine/notes", method: .post).status == .notFound)
            #expect(try await client.execute(uri: "/things/42", method: .get).status == .ok)
            // No route has the path, or the route itself says 404: both stay 404.
            #expect(try await client.execute(uri: "/nothing/here", method: .put).status == .notFound)
            #expect(try await client.execute(uri: "/things", method: .put).status == .notFound)
            #expect(try await client.execute(uri: "/missing/1", method: .get).status == .notFound)
        }
    }
}
