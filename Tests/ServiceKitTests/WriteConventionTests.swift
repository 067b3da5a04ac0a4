import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Models
import NIOCore
import PostgresNIO
import ServiceKit
import ServiceKitDatabase
import ServiceKitHTTP
import Synchronization
import Testing
import TestSupport

/// The kit's conventions for writes, once for every service: `Idempotency-Key` on `POST`s and
/// `ETag` / `If-Match` on edits.
@Suite struct WriteConventionTests {
    /// Stands in for the token middleware: `X-Test-User` names the caller.
    struct TestCaller<Context: IdentifiedRequestContext>: RouterMiddleware {
        func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
            var context = context
            if let user = request.headers[HTTPField.Name("X-Test-User")!].flatMap(UUID.init(uuidString:)) {
                context.caller = Caller(userID: user, sessionID: nil, roles: [.user], emailVerified: true)
            }
            return try await next(request, context)
        }
    }

    struct Created: ResponseEncodable, Codable { var n: Int; var echo: String }

    final class Counter: Sendable {
        let runs = Atomic<Int>(0)
        /// Until set, `/held` does not answer.
        let released = Atomic<Bool>(false)
        func next() -> Int { runs.add(1, ordering: .relaxed).newValue }
        var value: Int { runs.load(ordering: .relaxed) }
    }

    static func withApp(_ body: @escaping @Sendable (any TestClientProtocol, Counter) async throws -> Void) async throws {
        try await withApp { client, counter, _ in try await body(client, counter) }
    }

    static func withApp(_ body: @escaping @Sendable (any TestClientProtocol, Counter, PostgresClient) async throws -> Void) async throws {
        let database = try await TestDatabase.create(services: ["social"])
        let postgres = PostgresClient(database: database.config(for: "social"), logger: TestEnvironment.logger)
        let counter = Counter()
        let router = Router(context: ServiceRequestContext.self)
        router.add(middleware: ProblemMiddleware())
        router.add(middleware: TestCaller())
        // Photos take up to 4 MiB, everything else a JSON body's `maxUploadSize`.
        let photos = BodyLimits(limits: ["/photos/*/upload": 4 << 20])
        router.add(middleware: IdempotencyMiddleware(postgres: postgres, excludedPrefixes: ["/open/"], waitLimit: .seconds(10), bodyLimits: photos))
        router.post("things") { request, context -> EditedResponse<Created> in
            let text = String(buffer: try await request.body.collect(upTo: 1 << 16))
            let n = counter.next()
            // Long enough for concurrent requests with the key to arrive while this one runs.
            try await Task.sleep(for: .milliseconds(150))
            return EditedResponse(status: .created, headers: [.eTag: "\"\(n)\"", .location: "/things/\(n)"], response: Created(n: n, echo: text))
        }
        router.post("open/things") { _, _ -> Created in Created(n: counter.next(), echo: "") }
        router.post("held") { request, _ -> Created in
            let text = String(buffer: try await request.body.collect(upTo: 1 << 16))
            let n = counter.next()
            let deadline = ContinuousClock.now + .seconds(30)
            while !counter.released.load(ordering: .relaxed), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
            return Created(n: n, echo: text)
        }
        router.post("photos/:id/upload") { request, context -> Created in
            Created(n: counter.next(), echo: "\(try await request.body.collect(upTo: 4 << 20).readableBytes)")
        }
        router.post("broken") { _, _ -> Created in
            let n = counter.next()
            if n == 1 { throw APIError(.serviceUnavailable, code: "service_unavailable", detail: "Try again.") }
            return Created(n: n, echo: "")
        }
        try await Application(router: router, services: [postgres]).test(.live) { client in
            try await withClientReady(postgres)
            try await body(client, counter, postgres)
        }
    }

    static func withClientReady(_ postgres: PostgresClient) async throws {
        // The kit's tables and the account hold a service has, with the tombstones its own migrations make.
        let tombstones = Migration(name: "0001_deleted_accounts", sql: "CREATE TABLE deleted_accounts (user_hash bytea PRIMARY KEY)")
        _ = try await MigrationRunner(
            client: postgres, schema: "social", migrations: IdempotencySchema.migrations + DeletedAccountsSchema.migrations + [tombstones], logger: TestEnvironment.logger
        ).run()
    }

    static func post(_ client: any TestClientProtocol, _ path: String = "/things", user: UUID?, key: String?, body: String) async throws -> TestResponse {
        var headers: HTTPFields = [.contentType: "application/json"]
        if let user { headers[HTTPField.Name("X-Test-User")!] = user.uuidString }
        if let key { headers[IdempotencyMiddleware<ServiceRequestContext>.headerName] = key }
        return try await client.execute(uri: path, method: .post, headers: headers, body: ByteBuffer(string: body))
    }

    @Test(.timeLimit(.minutes(1))) func aRetriedPostRunsOnceAndReplaysTheFirstAnswer() async throws {
        try await Self.withApp { client, counter in
            let user = UUID()
            let first = try await Self.post(client, user: user, key: "k-1", body: #"{"a":1}"#)
            #expect(first.status == .created)
            let again = try await Self.post(client, user: user, key: "k-1", body: #"{"a":1}"#)
            #expect(again.status == .created && String(buffer: again.body) == String(buffer: first.body))
            #expect(again.headers[IdempotencyMiddleware<ServiceRequestContext>.replayedHeaderName] == "true")
            // The first response's own headers come back with it.
            #expect(again.headers[.eTag] == first.headers[.eTag] && again.headers[.location] == "/things/1" && again.headers[.contentType] == first.headers[.contentType])
            #expect(counter.value == 1)

            // The same key with another body is refused; another user's key of the same name is theirs.
            let reused = try await Self.post(client, user: user, key: "k-1", body: #"{"a":2}"#)
            #expect(reused.status == .unprocessableContent)
            #expect(try JSONDecoder.api.decode(Problem.self, from: Data(buffer: reused.body)).code == "idempotency_key_reused")
            #expect(try await Self.post(client, user: UUID(), key: "k-1", body: #"{"a":1}"#).status == .created)
            #expect(counter.value == 2)

            // Without a key, or without a caller, every request runs.
            _ = try await Self.post(client, user: user, key: nil, body: "{}")
            _ = try await Self.post(client, user: nil, key: "k-anon", body: "{}")
            _ = try await Self.post(client, user: nil, key: "k-anon", body: "{}")
            #expect(counter.value == 5)

            // Paths a service excludes (answers that must never be kept) run every time.
            #expect(try await Self.post(client, "/open/things", user: user, key: "o-1", body: "{}").status == .ok)
            #expect(try await Self.post(client, "/open/things", user: user, key: "o-1", body: "{}").headers[IdempotencyMiddleware<ServiceRequestContext>.replayedHeaderName] == nil)
            #expect(counter.value == 7)

            for bad in ["", String(repeating: "k", count: 256), "has space", "é"] {
                let response = try await Self.post(client, user: user, key: bad, body: "{}")
                #expect(response.status == .badRequest, "\(bad)")
            }
            #expect(counter.value == 7)
        }
    }

    /// A keyed body is read whole, to be hashed, before its route runs: as far as the route would
    /// read it and no further.
    @Test(.timeLimit(.minutes(1))) func aKeyedBodyIsReadAsFarAsItsRouteWould() async throws {
        try await Self.withApp { client, counter in
            let user = UUID()
            // Refused from the length it announces, before any of the body is sent: a head alone, on a
            // connection of its own, which ends with the answer.
            @Sendable func announce(_ path: String, key: String, bytes: Int) async throws -> String {
                let port = try #require(client.port)
                return try await LoopbackSocket.blocking {
                    let fd = try LoopbackSocket.connect(port: port)
                    defer { close(fd) }
                    let head =
                        "POST \(path) HTTP/1.1\r\nHost: kit\r\nContent-Type: application/json\r\nX-Test-User: \(user.uuidString)\r\n"
                        + "Idempotency-Key: \(key)\r\nContent-Length: \(bytes)\r\n\r\n"
                    _ = LoopbackSocket.send(fd, Array(head.utf8))
                    // The whole response, by its length: the answer says `Connection: close`, which a
                    // client heeds by closing.
                    var buffer = [UInt8](repeating: 0, count: 65536)
                    var received = ""
                    while true {
                        if let end = received.range(of: "\r\n\r\n"),
                            let length = received[..<end.lowerBound].lowercased().components(separatedBy: "\r\n").first(where: { $0.hasPrefix("content-length:") })
                                .flatMap({ Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) }),
                            received[end.upperBound...].utf8.count >= length
                        {
                            return received
                        }
                        let count = LoopbackSocket.receive(fd, into: &buffer)
                        if count <= 0 { return received }
                        received += String(decoding: buffer[0..<count], as: UTF8.self)
                    }
                }
            }
            // A JSON route: past `maxUploadSize` (2 MiB), refused before it runs.
            let json = try await announce("/things", key: "big-1", bytes: (2 << 20) + 1)
            #expect(json.hasPrefix("HTTP/1.1 413"), "\(json)")
            let problem = try JSONDecoder.api.decode(Problem.self, from: Data(try #require(json.components(separatedBy: "\r\n\r\n").last).utf8))
            #expect(problem.code == "payload_too_large" && problem.detail?.contains("2 MiB") == true, "\(problem)")
            // A route the service names as larger: read whole, run once, replayed.
            let photo = String(repeating: "p", count: 3 << 20)
            let first = try await Self.post(client, "/photos/a/upload", user: user, key: "photo-1", body: photo)
            #expect(first.status == .ok && String(buffer: first.body).contains("\"echo\":\"\(3 << 20)\""), "\(first.status)")
            let again = try await Self.post(client, "/photos/a/upload", user: user, key: "photo-1", body: photo)
            #expect(again.headers[IdempotencyMiddleware<ServiceRequestContext>.replayedHeaderName] == "true")
            // Past that route's own limit, refused.
            let over = try await announce("/photos/a/upload", key: "photo-2", bytes: (4 << 20) + 1)
            #expect(over.hasPrefix("HTTP/1.1 413"), "\(over)")
            #expect(counter.value == 1)
        }
    }

    @Test(.timeLimit(.minutes(1))) func concurrentRequestsWithOneKeyRunOnce() async throws {
        try await Self.withApp { client, counter in
            let user = UUID()
            let answers = try await withThrowingTaskGroup(of: (Int, String).self) { group in
                for _ in 0..<20 {
                    group.addTask {
                        let response = try await Self.post(client, user: user, key: "together", body: #"{"x":true}"#)
                        return (Int(response.status.code), String(buffer: response.body))
                    }
                }
                return try await group.reduce(into: [(Int, String)]()) { $0.append($1) }
            }
            #expect(counter.value == 1)
            #expect(answers.count == 20 && Set(answers.map(\.0)) == [201] && Set(answers.map(\.1)).count == 1)
        }
    }

    /// A deleted account's token outlives it: its keyed request is refused before the route runs,
    /// and no row names the account, not even for a route that writes nothing of it.
    @Test(.timeLimit(.minutes(1))) func aDeletedAccountsKeyIsRefusedAndKeepsNothing() async throws {
        try await Self.withApp { client, counter, postgres in
            let (deleted, live) = (UUID(), UUID())
            try await postgres.query(
                "INSERT INTO deleted_accounts (user_hash) VALUES (sha256(convert_to(\(deleted.uuidString.lowercased()), 'UTF8')))", logger: TestEnvironment.logger)
            for attempt in 1...2 {
                let refused = try await Self.post(client, user: deleted, key: "d-1", body: "{}")
                #expect(refused.status == .unauthorized, "\(attempt): \(String(buffer: refused.body))")
                #expect(try JSONDecoder.api.decode(Problem.self, from: Data(buffer: refused.body)).code == "account_deleted")
            }
            #expect(counter.value == 0)
            var rows = 0
            for try await count in try await postgres.query("SELECT count(*)::int FROM idempotency_keys WHERE user_id = \(deleted)", logger: TestEnvironment.logger)
                .decode(Int.self)
            { rows = count }
            #expect(rows == 0)
            // A live account's key of the same name is its own.
            #expect(try await Self.post(client, user: live, key: "d-1", body: "{}").status == .created)
            #expect(counter.value == 1)
        }
    }

    /// When an account is deleted, the answers kept for others that name it (a coach's comment in
    /// a client's session) are withheld, and so are those of requests still running then: a retry
    /// is neither shown what went with the account nor run again. Others' answers are replayed.
    @Test(.timeLimit(.minutes(1))) func answersNamingADeletedAccountAreWithheld() async throws {
        try await Self.withApp { client, counter, postgres in
            let (deleted, user) = (UUID(), UUID())
            let naming = #"{"coach":""# + deleted.uuidString.lowercased() + #""}"#
            #expect(try await Self.post(client, user: user, key: "names", body: naming).status == .created)
            #expect(try await Self.post(client, user: user, key: "other", body: #"{"coach":null}"#).status == .created)
            let running = Task { try await Self.post(client, "/held", user: user, key: "running", body: "{}") }
            try await waitUntil(.seconds(10)) {
                var pending = 0
                for try await count in try await postgres.query("SELECT count(*)::int FROM idempotency_keys WHERE key = 'running' AND status IS NULL", logger: TestEnvironment.logger)
                    .decode(Int.self)
                { pending = count }
                return pending == 1
            }
            try await postgres.withConnection { try await $0.withholdKeptAnswers(naming: deleted, logger: TestEnvironment.logger) }
            counter.released.store(true, ordering: .relaxed)
            // The running request is answered as ever; only what is kept of it changes.
            #expect(try await running.value.status == .ok)
            #expect(counter.value == 3)

            for key in ["names", "running"] {
                let path = key == "running" ? "/held" : "/things"
                let retried = try await Self.post(client, path, user: user, key: key, body: key == "names" ? naming : "{}")
                #expect(retried.status == .conflict, "\(key): \(String(buffer: retried.body))")
                #expect(try JSONDecoder.api.decode(Problem.self, from: Data(buffer: retried.body)).code == "idempotency_answer_withheld")
            }
            let replayed = try await Self.post(client, user: user, key: "other", body: #"{"coach":null}"#)
            #expect(replayed.status == .created && replayed.headers[IdempotencyMiddleware<ServiceRequestContext>.replayedHeaderName] == "true")
            #expect(counter.value == 3)

            // A key a day old is taken by the next request with it, whose answer is kept again.
            try await postgres.query("UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE key = 'names'", logger: TestEnvironment.logger)
            #expect(try await Self.post(client, user: user, key: "names", body: naming).status == .created)
            #expect(counter.value == 4)
            let kept = try await Self.post(client, user: user, key: "names", body: naming)
            #expect(kept.status == .created && kept.headers[IdempotencyMiddleware<ServiceRequestContext>.replayedHeaderName] == "true", "\(String(buffer: kept.body))")
            #expect(counter.value == 4)
        }
    }

    /// Answers a day old are deleted whether or not requests come, a backlog at once (in batches),
    /// younger ones kept and still replayed.
    @Test(.timeLimit(.minutes(1))) func answersADayOldAreDeletedWithoutARequest() async throws {
        try await Self.withApp { client, counter, postgres in
            let user = UUID()
            for key in ["young", "old"] { #expect(try await Self.post(client, user: user, key: key, body: "{}").status == .created) }
            try await postgres.query(
                """
                INSERT INTO idempotency_keys (user_id, route, key, request_hash, claim_id, status, headers, body, created_at)
                SELECT gen_random_uuid(), 'POST /things', 'backlog-' || n, '\\x00', gen_random_uuid(), 201, '', '{}', now() - interval '2 days'
                FROM generate_series(1, 2500) n
                """, logger: TestEnvironment.logger)
            try await postgres.query("UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE key = 'old'", logger: TestEnvironment.logger)
            @Sendable func count(_ condition: String) async throws -> Int {
                var rows = -1
                for try await n in try await postgres.query(PostgresQuery(unsafeSQL: "SELECT count(*)::int FROM idempotency_keys WHERE \(condition)"), logger: TestEnvironment.logger)
                    .decode(Int.self)
                { rows = n }
                return rows
            }
            #expect(try await count("true") == 2502)
            // Its first pass alone: the next is ten minutes on.
            let janitor = Task { try await IdempotencyJanitor(postgres: postgres, logger: TestEnvironment.logger).run() }
            defer { janitor.cancel() }
            try await waitUntil(.seconds(20)) { try await count("true") == 1 }
            #expect(try await count("key = 'young'") == 1)
            let replayed = try await Self.post(client, user: user, key: "young", body: "{}")
            #expect(replayed.headers[IdempotencyMiddleware<ServiceRequestContext>.replayedHeaderName] == "true")
            #expect(counter.value == 2)
        }
    }

    @Test(.timeLimit(.minutes(1))) func aFailedAnswerIsNotKeptSoTheRetryRuns() async throws {
        try await Self.withApp { client, counter in
            let user = UUID()
            #expect(try await Self.post(client, "/broken", user: user, key: "b-1", body: "{}").status == .serviceUnavailable)
            let retried = try await Self.post(client, "/broken", user: user, key: "b-1", body: "{}")
            #expect(retried.status == .ok && counter.value == 2)
            #expect(retried.headers[IdempotencyMiddleware<ServiceRequestContext>.replayedHeaderName] == nil)
            #expect(try await Self.post(client, "/broken", user: user, key: "b-1", body: "{}").headers[IdempotencyMiddleware<ServiceRequestContext>.replayedHeaderName] == "true")
        }
    }

    /// `If-Match` with the current version passes, with a stale one is `412`, and `*` or no header passes.
    @Test func aStaleIfMatchIsPreconditionFailed() async throws {
        let version = Mutex<Int64>(1)
        let router = Router(context: ServiceRequestContext.self)
        router.add(middleware: ProblemMiddleware())
        router.get("doc") { _, _ -> EditedResponse<String> in
            EditedResponse(headers: [.eTag: EntityTag(version: version.withLock { $0 }).description], response: "doc")
        }
        router.put("doc") { request, _ -> EditedResponse<String> in
            let next = try version.withLock { current -> Int64 in
                try EntityTag(version: current).check(ifMatchOf: request)
                current += 1
                return current
            }
            return EditedResponse(headers: [.eTag: EntityTag(version: next).description], response: "doc")
        }
        try await Application(router: router).test(.router) { client in
            let read = try await client.execute(uri: "/doc", method: .get)
            let tag = try #require(read.headers[.eTag])
            #expect(tag == "\"1\"")
            let edited = try await client.execute(uri: "/doc", method: .put, headers: [.ifMatch: tag])
            #expect(edited.status == .ok && edited.headers[.eTag] == "\"2\"")
            let stale = try await client.execute(uri: "/doc", method: .put, headers: [.ifMatch: tag])
            #expect(stale.status == .preconditionFailed && stale.headers[.eTag] == "\"2\"")
            #expect(try JSONDecoder.api.decode(Problem.self, from: Data(buffer: stale.body)).code == "precondition_failed")
            #expect(try await client.execute(uri: "/doc", method: .put, headers: [.ifMatch: "W/\"2\""]).status == .preconditionFailed)
            #expect(try await client.execute(uri: "/doc", method: .put, headers: [.ifMatch: "\"9\", \"2\""]).status == .ok)
            #expect(try await client.execute(uri: "/doc", method: .put, headers: [.ifMatch: "*"]).status == .ok)
            // `*` beside tags is no member: a stale tag does not pass with it.
            #expect(try await client.execute(uri: "/doc", method: .put, headers: [.ifMatch: "\"1\", *"]).status == .preconditionFailed)
            // An `If-Match` naming nothing matches nothing.
            #expect(try await client.execute(uri: "/doc", method: .put, headers: [.ifMatch: ","]).status == .preconditionFailed)
            #expect(try await client.execute(uri: "/doc", method: .put).status == .ok)
        }
    }
}
