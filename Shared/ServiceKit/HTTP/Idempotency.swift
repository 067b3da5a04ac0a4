import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import PostgresNIO
import ServiceKitDatabase
import Synchronization

/// `Idempotency-Key` on `POST`s: an app that retries a write it never saw answered (offline-first
/// apps do) gets the first answer again instead of a second copy.
///
/// - The first answer to a key, per signed-in caller, method and path, is stored for 24 hours and
///   replayed to a retry with the same key and the same body (`Idempotent-Replayed: true`).
/// - The same key with another body is `422 idempotency_key_reused`.
/// - Requests with one key at once run once: the others wait for the first answer and replay it
///   (`409 idempotency_key_in_use` with `Retry-After` if it takes longer than `waitLimit`).
/// - An answer of 5xx, or an error the route threw, is not stored: the key can be retried.
/// - Anonymous requests ignore the header (a key alone must not replay someone else's answer).
///
/// A process that stops between the route's commit and storing its answer leaves the key pending;
/// after `abandonedAfter` another request may take the key over and run the route again.
public struct IdempotencyMiddleware<Context: IdentifiedRequestContext>: RouterMiddleware {
    let postgres: PostgresClient
    let waitLimit: Duration
    let abandonedAfter: Duration
    let maxBodySize: Int

    public static var headerName: HTTPField.Name { HTTPField.Name("Idempotency-Key")! }
    public static var replayedHeaderName: HTTPField.Name { HTTPField.Name("Idempotent-Replayed")! }

    public init(postgres: PostgresClient, waitLimit: Duration = .seconds(10), abandonedAfter: Duration = .seconds(60), maxBodySize: Int = 8 << 20) {
        self.postgres = postgres
        self.waitLimit = waitLimit
        self.abandonedAfter = abandonedAfter
        self.maxBodySize = maxBodySize
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard request.method == .post, let key = request.headers[Self.headerName], let caller = context.caller else {
            return try await next(request, context)
        }
        guard (1...255).contains(key.utf8.count), key.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
            throw APIError(.badRequest, code: "invalid_idempotency_key", detail: "Idempotency-Key is 1 to 255 visible ASCII characters.")
        }
        var request = request
        let body = try await request.body.collect(upTo: maxBodySize)
        request.body = RequestBody(buffer: body)
        let route = "\(request.method.rawValue) \(request.uri.path)"
        let hash = Data(SHA256.hash(data: Data(buffer: body, byteTransferStrategy: .noCopy)))
        let record = IdempotencyRecord(postgres: postgres, user: caller.userID, route: route, key: key, requestHash: hash, logger: context.logger)

        let deadline = ContinuousClock.now + waitLimit
        while true {
            if try await record.claim(abandonedAfter: abandonedAfter) {
                return try await runAndStore(request, context: context, record: record, next: next)
            }
            switch try await record.stored() {
            case .none:
                continue  // the first attempt failed and gave the key back: claim it again
            case .differentRequest:
                throw APIError(
                    .unprocessableContent, code: "idempotency_key_reused",
                    detail: "This Idempotency-Key was used with a different request; use a new key for a new request.")
            case .answered(let status, let contentType, let body):
                var headers: HTTPFields = [Self.replayedHeaderName: "true", .cacheControl: "no-store"]
                if let contentType { headers[.contentType] = contentType }
                return Response(status: .init(code: status), headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
            case .pending:
                guard ContinuousClock.now < deadline else {
                    throw APIError(
                        .conflict, code: "idempotency_key_in_use",
                        detail: "A request with this Idempotency-Key is still running; retry shortly.", headers: [.retryAfter: "1"])
                }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
    }

    private func runAndStore(_ request: Request, context: Context, record: IdempotencyRecord, next: (Request, Context) async throws -> Response) async throws -> Response {
        let response: Response
        do {
            response = try await next(request, context)
        } catch {
            try? await record.release()
            throw error
        }
        guard response.status.code < 500 else {
            try? await record.release()
            return response
        }
        let collector = BodyCollector()
        var answer = response
        try await response.body.write(collector)
        let bytes = collector.bytes
        try await record.store(status: Int(response.status.code), contentType: response.headers[.contentType], body: bytes)
        answer.body = .init(byteBuffer: ByteBuffer(bytes: bytes))
        return answer
    }
}

/// The kit's table for `IdempotencyMiddleware`, in every service's schema.
public enum IdempotencySchema {
    public static let migrations = [
        Migration(
            name: "0000_idempotency_keys",
            sql: """
                CREATE TABLE idempotency_keys (
                    user_id uuid NOT NULL,
                    route text NOT NULL,
                    key text NOT NULL,
                    request_hash bytea NOT NULL,
                    -- null while the first request runs
                    status int,
                    content_type text,
                    body bytea,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (user_id, route, key)
                );
                CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);
                """)
    ]
}

/// One key's row.
struct IdempotencyRecord {
    let postgres: PostgresClient
    let user: UUID
    let route: String
    let key: String
    let requestHash: Data
    let logger: Logger

    enum Stored {
        case none
        case differentRequest
        case pending
        case answered(status: Int, contentType: String?, body: [UInt8])
    }

    /// Takes the key for this request: a new row, or one that expired (24 hours) or whose request was
    /// abandoned while pending. Old rows of any key are removed on the way, a few at a time.
    func claim(abandonedAfter: Duration) async throws -> Bool {
        let abandoned = Double(abandonedAfter.components.seconds)
        let query: PostgresQuery = """
            WITH expired AS (
                DELETE FROM idempotency_keys WHERE ctid IN (
                    SELECT ctid FROM idempotency_keys WHERE created_at < now() - interval '24 hours' LIMIT 10)
            )
            INSERT INTO idempotency_keys (user_id, route, key, request_hash) VALUES (\(user), \(route), \(key), \(ByteBuffer(bytes: requestHash)))
            ON CONFLICT (user_id, route, key) DO UPDATE SET request_hash = EXCLUDED.request_hash, status = NULL, content_type = NULL, body = NULL, created_at = now()
                WHERE idempotency_keys.created_at < now() - interval '24 hours'
                   OR (idempotency_keys.status IS NULL AND idempotency_keys.created_at < now() - make_interval(secs => \(abandoned)))
            RETURNING 1
            """
        return try await postgres.withConnectionOnItsLoop { try await $0.returnsRow(query, logger: logger) }
    }

    func stored() async throws -> Stored {
        let query: PostgresQuery = "SELECT request_hash, status, content_type, body FROM idempotency_keys WHERE user_id = \(user) AND route = \(route) AND key = \(key)"
        let requestHash = self.requestHash
        let logger = self.logger
        return try await postgres.withConnectionOnItsLoop { connection -> Stored in
            var found = Stored.none
            for try await (hash, status, contentType, body) in try await connection.checkedQuery(query, logger: logger).decode((Data, Int?, String?, Data?).self) {
                if hash != requestHash {
                    found = .differentRequest
                } else if let status {
                    found = .answered(status: status, contentType: contentType, body: Array(body ?? Data()))
                } else {
                    found = .pending
                }
            }
            return found
        }
    }

    func store(status: Int, contentType: String?, body: [UInt8]) async throws {
        let query: PostgresQuery = """
            UPDATE idempotency_keys SET status = \(status), content_type = \(contentType), body = \(ByteBuffer(bytes: body))
            WHERE user_id = \(user) AND route = \(route) AND key = \(key) AND status IS NULL
            """
        try await run(query)
    }

    /// Gives the key back after a failure, so that a retry runs the route again.
    func release() async throws {
        try await run("DELETE FROM idempotency_keys WHERE user_id = \(user) AND route = \(route) AND key = \(key) AND status IS NULL")
    }

    private func run(_ query: PostgresQuery) async throws {
        let logger = self.logger
        _ = try await postgres.withConnectionOnItsLoop { try await $0.returnsRow(query, logger: logger) }
    }
}

/// Collects a response body's bytes (the answers stored here are the API's JSON, a few KiB).
final class BodyCollector: ResponseBodyWriter, Sendable {
    private let collected = Mutex<[UInt8]>([])

    var bytes: [UInt8] { collected.withLock { $0 } }

    func write(_ buffer: ByteBuffer) async throws {
        collected.withLock { $0.append(contentsOf: buffer.readableBytesView) }
    }

    func finish(_ trailingHeaders: HTTPFields?) async throws {}
}
