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
/// apps do) gets the first response again instead of a second copy.
///
/// - The first response to a key, per signed-in caller, method and path, is stored for 24 hours and
///   replayed to a retry with the same key and the same body (`Idempotent-Replayed: true`); then
///   `IdempotencyJanitor` deletes it within its interval.
/// - The same key with another body is `422 idempotency_key_reused`.
/// - Requests with one key at once run once: the others wait for the first response and replay it
///   (`409 idempotency_key_in_use` with `Retry-After` if it takes longer than `waitLimit`).
/// - A response of 5xx, or an error the route threw, is not stored: the key can be retried.
/// - Anonymous requests ignore the header (a key alone must not replay someone else's answer), and
///   so do paths under `excludedPrefixes`: a service's routes whose responses must never be kept
///   (auth's sign-ins and refreshes answer with tokens; their bodies hold passwords).
/// - A body is read whole to be hashed, as far as its route would read it: `bodyLimits`, the
///   service's larger-bodied routes (a photo's), else the context's `maxUploadSize` (a JSON body's);
///   over it, `413 payload_too_large`.
/// - A response over `maxStoredResponse` bytes is not kept.
/// - A response that holds a secret (a route marks it with `IdempotentResponse.holdsSecret`: a token
///   stored only as its hash) is never kept: its status is, so a retry with the key does not run the
///   route again, and is answered `409 idempotency_answer_withheld`. So is a retry whose kept answer
///   named an account deleted since (`withholdKeptAnswers`).
///
/// A process that stops between the route's commit and storing its response leaves the key pending;
/// after `abandonedAfter` another request may take the key over and run the route again. Each claim
/// is its own (`claim_id`): a request that outlived its claim cannot store into, or release, the
/// claim that took the key over.
///
/// A deleted account's access token outlives it by up to 15 minutes: a key it sends is refused
/// with `401 account_deleted` before the route runs, and makes no row (a route that writes nothing
/// would otherwise have its answer kept, naming the account, for 24 hours). The claim holds the
/// account as a route's write does (`hold_live_account`), so a deletion running meanwhile is waited
/// for and its tombstone found; a key claimed before the deletion goes with the account's other
/// rows, and the response then finds no row to be stored in.
package struct IdempotencyMiddleware<Context: IdentifiedRequestContext>: RouterMiddleware {
    let postgres: PostgresClient
    let waitLimit: Duration
    let abandonedAfter: Duration
    let bodyLimits: BodyLimits
    let maxStoredResponse: Int
    let excludedPrefixes: [String]

    package static var headerName: HTTPField.Name { HTTPField.Name("Idempotency-Key")! }
    package static var replayedHeaderName: HTTPField.Name { HTTPField.Name("Idempotent-Replayed")! }

    package init(
        postgres: PostgresClient, excludedPrefixes: [String] = [], waitLimit: Duration = .seconds(10), abandonedAfter: Duration = .seconds(60), bodyLimits: BodyLimits = BodyLimits(limits: [:]),
        maxStoredResponse: Int = 1 << 20
    ) {
        self.postgres = postgres
        self.excludedPrefixes = excludedPrefixes
        self.waitLimit = waitLimit
        self.abandonedAfter = abandonedAfter
        self.bodyLimits = bodyLimits
        self.maxStoredResponse = maxStoredResponse
    }

    /// What makes two requests the same: the body's bytes, except for a `multipart/form-data` body,
    /// whose boundary a client draws afresh for each request (retries included): there, each part's
    /// name, type and bytes, in order.
    static func requestHash(_ body: ByteBuffer, contentType: String?) -> Data {
        var hasher = SHA256()
        if let boundary = contentType.flatMap(MultipartForm.boundary(of:)), let form = try? MultipartForm(body, boundary: boundary) {
            // Each field with its length before it, so that no two lists of parts hash alike.
            func add(_ bytes: ByteBuffer) {
                withUnsafeBytes(of: UInt64(bytes.readableBytes).bigEndian) { hasher.update(bufferPointer: $0) }
                bytes.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
            }
            add(ByteBuffer(string: "multipart/form-data"))
            for part in form.parts {
                add(ByteBuffer(string: part.name))
                add(ByteBuffer(string: part.contentType ?? ""))
                add(part.body)
            }
        } else {
            body.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
        }
        return Data(hasher.finalize())
    }

    package func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard request.method == .post, let key = request.headers[Self.headerName], let caller = context.caller,
            !excludedPrefixes.contains(where: { request.uri.path.hasPrefix($0) })
        else {
            return IdempotentResponse.unmarked(try await next(request, context))
        }
        guard (1...255).contains(key.utf8.count), key.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
            throw APIError(.badRequest, code: "invalid_idempotency_key", detail: "Idempotency-Key is 1 to 255 visible ASCII characters.")
        }
        var request = request
        let limit = bodyLimits.limit(for: request.uri.path, otherwise: context.maxUploadSize)
        if let length = request.headers[.contentLength].flatMap(Int.init), length > limit { throw BodyLimits.tooLarge(limit) }
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: limit)
        } catch is NIOTooManyBytesError {
            throw BodyLimits.tooLarge(limit)
        }
        request.body = RequestBody(buffer: body)
        let route = "\(request.method.rawValue) \(request.uri.path)"
        let hash = Self.requestHash(body, contentType: request.headers[.contentType])
        let record = IdempotencyRecord(postgres: postgres, user: caller.userID, route: route, key: key, requestHash: hash, logger: context.logger)

        let deadline = ContinuousClock.now + waitLimit
        while true {
            switch try await record.claim(abandonedAfter: abandonedAfter) {
            case .claimed: return try await runAndStore(request, context: context, record: record, next: next)
            case .accountDeleted: throw APIError.accountDeleted
            case .taken: break
            }
            switch try await record.stored() {
            case .none:
                continue  // the first attempt failed and gave the key back: claim it again
            case .differentRequest:
                throw APIError(
                    .unprocessableContent, code: "idempotency_key_reused",
                    detail: "This Idempotency-Key was used with a different request; use a new key for a new request.")
            case .answered(let status, let headerLines, let body):
                var headers = Self.headers(from: headerLines)
                headers[Self.replayedHeaderName] = "true"
                return Response(status: .init(code: status), headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
            case .withheld:
                throw APIError(
                    .conflict, code: "idempotency_answer_withheld",
                    detail:
                        "The request with this Idempotency-Key was answered, but its response is not kept (it held a secret, or named an account since deleted), so it cannot be sent again. Make a new request with a new key."
                )
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
        var answersRetries = false
        do {
            response = try await next(request, context)
        } catch let error as APIError where error.answersRetries {
            // The route's answer, kept like a success's, a 5xx too: a failure that cost something
            // (a model asked, and counted) is told again rather than run again.
            response = ProblemMiddleware<Context>.response(for: error, request: request, context: context)
            answersRetries = true
        } catch {
            await record.release()
            throw error
        }
        guard answersRetries || response.status.code < 500 else {
            await record.release()
            return IdempotentResponse.unmarked(response)
        }
        if response.headers[IdempotentResponse.holdsSecretName] != nil {
            // Only the status is kept: enough for a retry not to run the route again.
            let answer = IdempotentResponse.unmarked(response)
            do {
                try await record.store(status: Int(answer.status.code), headers: "", body: nil)
            } catch {
                context.logger.error("idempotent response's status not stored", metadata: ["error": "\(error)"])
            }
            return answer
        }
        let collector = BodyCollector(limit: maxStoredResponse)
        var answer = response
        try await response.body.write(collector)
        guard let bytes = collector.bytes else {
            // Too large to keep: the key is given back, and a retry runs the route again.
            await record.release()
            answer.body = .init(byteBuffer: collector.buffer)
            return answer
        }
        // The route has done its work: a failure to keep the response must not turn it into an error
        // (the client would retry and, once the claim is abandoned, run it twice). The claim stays
        // pending until then.
        do {
            try await record.store(status: Int(response.status.code), headers: Self.lines(of: response.headers), body: bytes)
        } catch {
            context.logger.error("idempotent answer not stored", metadata: ["error": "\(error)"])
        }
        answer.body = .init(byteBuffer: ByteBuffer(bytes: bytes))
        return answer
    }

    /// The response's headers as `name: value` lines, less those the kit writes per answer.
    static func lines(of headers: HTTPFields) -> String {
        headers.filter { ![HTTPField.Name.date, .server, HTTPField.Name("X-Request-ID")!].contains($0.name) }
            .map { "\($0.name.canonicalName): \($0.value)" }.joined(separator: "\n")
    }

    static func headers(from lines: String) -> HTTPFields {
        var headers = HTTPFields()
        for line in lines.split(separator: "\n") {
            guard let colon = line.firstIndex(of: ":"), let name = HTTPField.Name(String(line[..<colon])) else { continue }
            headers.append(HTTPField(name: name, value: String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces)))
        }
        return headers
    }
}

/// What a route tells `IdempotencyMiddleware` about its response.
public enum IdempotentResponse {
    /// Marks a response that holds a secret the service keeps only hashed (a share link's token): the
    /// middleware keeps its status, never its body, and takes the mark off before the response leaves.
    package static let holdsSecretName = HTTPField.Name("X-Idempotency-Holds-Secret")!

    /// The headers a route adds to such a response.
    public static var holdsSecret: HTTPFields { [holdsSecretName: "true"] }

    /// `response` without the mark.
    static func unmarked(_ response: Response) -> Response {
        guard response.headers[holdsSecretName] != nil else { return response }
        var response = response
        response.headers[holdsSecretName] = nil
        return response
    }
}

/// The kit's table for `IdempotencyMiddleware`, in every service's schema.
package enum IdempotencySchema {
    package static let migrations = [
        Migration(
            name: "0000_idempotency_keys",
            sql: """
                CREATE TABLE idempotency_keys (
                    user_id uuid NOT NULL,
                    route text NOT NULL,
                    key text NOT NULL,
                    request_hash bytea NOT NULL,
                    -- whose run holds the key: a claim that was taken over cannot store or release
                    claim_id uuid NOT NULL,
                    -- null while the first request runs
                    status int,
                    headers text,
                    body bytea,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (user_id, route, key)
                );
                CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);
                """),
        // A key whose answer is not to be kept when it comes: its request was running when an
        // account was deleted, and may answer with what went with it (`withholdKeptAnswers`).
        Migration(name: "0000_idempotency_keys_withheld", sql: "ALTER TABLE idempotency_keys ADD COLUMN withheld boolean NOT NULL DEFAULT false"),
    ]
}

/// One key's row, and this request's claim on it.
struct IdempotencyRecord {
    let postgres: PostgresClient
    let user: UUID
    let route: String
    let key: String
    let requestHash: Data
    let claimID = UUID()
    let logger: Logger

    enum Stored {
        case none
        case differentRequest
        case pending
        case answered(status: Int, headers: String, body: [UInt8])
        /// Answered with a secret: the status was kept, the response not.
        case withheld(status: Int)
    }

    /// Takes the key for this request: a new row, or one that expired (24 hours) or whose request was
    /// abandoned while pending. Old rows of other keys are `IdempotencyJanitor`'s to remove.
    func claim(abandonedAfter: Duration) async throws -> ClaimOutcome {
        let claim = Claim(record: self, abandonedAfter: Double(abandonedAfter.components.seconds))
        let logger = self.logger
        return try await postgres.withConnectionOnItsLoop { connection in
            var outcome = ClaimOutcome.taken
            for try await (live, claimed) in try await connection.checkedExecute(claim, logger: logger) {
                outcome = !live ? .accountDeleted : claimed ? .claimed : .taken
            }
            return outcome
        }
    }

    enum ClaimOutcome {
        /// The key is this request's: the route runs.
        case claimed
        /// Another request holds the key, or answered it.
        case taken
        /// The caller's account was deleted; nothing was written.
        case accountDeleted
    }

    // `claim` and `store` run in every request that carries a key: prepared once per connection, as
    // PostgreSQL otherwise parses and plans each of them every time.

    struct Claim: PostgresPreparedStatement {
        static let name = "idempotency.claim"
        /// The account's hold comes first (`live` is materialized, and the insert reads it), and
        /// lasts until the statement commits.
        static let sql = """
            WITH live AS MATERIALIZED (SELECT hold_live_account($1) AS live),
            claimed AS (
                INSERT INTO idempotency_keys (user_id, route, key, request_hash, claim_id)
                SELECT $1, $2, $3, $4, $5 FROM live WHERE live.live
                ON CONFLICT (user_id, route, key) DO UPDATE SET request_hash = EXCLUDED.request_hash, claim_id = EXCLUDED.claim_id,
                    status = NULL, headers = NULL, body = NULL, withheld = false, created_at = now()
                    WHERE idempotency_keys.created_at < now() - interval '24 hours'
                       OR (idempotency_keys.status IS NULL AND idempotency_keys.created_at < now() - make_interval(secs => $6))
                RETURNING 1
            )
            SELECT live.live, EXISTS (SELECT 1 FROM claimed) FROM live
            """
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .text, .text, .bytea, .uuid, .float8]
        typealias Row = (Bool, Bool)

        let record: IdempotencyRecord
        let abandonedAfter: Double

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 6)
            bindings.append(record.user)
            bindings.append(record.route)
            bindings.append(record.key)
            bindings.append(ByteBuffer(bytes: record.requestHash))
            bindings.append(record.claimID)
            bindings.append(abandonedAfter)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> (Bool, Bool) { try row.decode((Bool, Bool).self) }
    }

    func stored() async throws -> Stored {
        let query: PostgresQuery = "SELECT request_hash, status, headers, body FROM idempotency_keys WHERE user_id = \(user) AND route = \(route) AND key = \(key)"
        let requestHash = self.requestHash
        let logger = self.logger
        return try await postgres.withConnectionOnItsLoop { connection -> Stored in
            var found = Stored.none
            for try await (hash, status, headers, body) in try await connection.checkedQuery(query, logger: logger).decode((Data, Int?, String?, Data?).self) {
                if hash != requestHash {
                    found = .differentRequest
                } else if let status, let body {
                    found = .answered(status: status, headers: headers ?? "", body: Array(body))
                } else if let status {
                    found = .withheld(status: status)
                } else {
                    found = .pending
                }
            }
            return found
        }
    }

    /// Keeps the response; `body` nil keeps only the status (the response held a secret), as does a
    /// key marked `withheld` while its request ran.
    func store(status: Int, headers: String, body: [UInt8]?) async throws {
        let store = Store(record: self, status: status, headers: headers, body: body)
        let logger = self.logger
        _ = try await postgres.withConnectionOnItsLoop { try await $0.returnsRow(store, logger: logger) }
    }

    struct Store: PostgresPreparedStatement {
        static let name = "idempotency.store"
        static let sql = """
            UPDATE idempotency_keys SET status = $5, headers = CASE WHEN withheld THEN '' ELSE $6 END, body = CASE WHEN withheld THEN NULL ELSE $7 END
            WHERE user_id = $1 AND route = $2 AND key = $3 AND claim_id = $4 AND status IS NULL
            RETURNING 1
            """
        static let bindingDataTypes: [PostgresDataType] = [.uuid, .text, .text, .uuid, .int4, .text, .bytea]
        typealias Row = Void

        let record: IdempotencyRecord
        let status: Int
        let headers: String
        let body: [UInt8]?

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 7)
            bindings.append(record.user)
            bindings.append(record.route)
            bindings.append(record.key)
            bindings.append(record.claimID)
            bindings.append(Int32(status))
            bindings.append(headers)
            if let body { bindings.append(ByteBuffer(bytes: body)) } else { bindings.appendNull() }
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws {}
    }

    /// Gives the key back after a failure, so that a retry runs the route again; only this claim's.
    func release() async {
        do {
            try await run("DELETE FROM idempotency_keys WHERE user_id = \(user) AND route = \(route) AND key = \(key) AND claim_id = \(claimID) AND status IS NULL")
        } catch {
            logger.warning("idempotency key not given back; it frees itself once abandoned", metadata: ["error": "\(error)"])
        }
    }

    private func run(_ query: PostgresQuery) async throws {
        let logger = self.logger
        _ = try await postgres.withConnectionOnItsLoop { try await $0.returnsRow(query, logger: logger) }
    }
}

/// Collects a response body up to `limit` bytes; past it `bytes` is nil and `buffer` holds it all.
final class BodyCollector: ResponseBodyWriter, Sendable {
    private let collected = Mutex<ByteBuffer>(ByteBuffer())
    let limit: Int

    init(limit: Int) { self.limit = limit }

    var buffer: ByteBuffer { collected.withLock { $0 } }
    var bytes: [UInt8]? { collected.withLock { $0.readableBytes <= limit ? Array($0.readableBytesView) : nil } }

    func write(_ buffer: ByteBuffer) async throws {
        var buffer = buffer
        collected.withLock { $0.writeBuffer(&buffer) }
    }

    func finish(_ trailingHeaders: HTTPFields?) async throws {}
}
