import Foundation
import HTTPTypes
import OpenAPIRuntime

/// The most of a problem+json body read, and of the body of a 401 looked at for its code.
let problemBodyLimit = 64 * 1024

extension HTTPField.Name {
    static let idempotencyKey = Self("Idempotency-Key")!
    static let retryAfter = Self("Retry-After")!
}

func collect(_ body: HTTPBody?) async throws -> Data {
    guard let body else { return Data() }
    return try await Data(collecting: body, upTo: problemBodyLimit)
}

/// Every POST gets an `Idempotency-Key` unless the caller set one: it is added here, outside the
/// retries, so each retry of the same call (after a refresh, a 503, a dropped connection) carries the
/// same key and the server answers it once.
///
/// Except on the paths where the server ignores the key (auth's and the invitations' services,
/// `idempotencyExcluded`): their answers hold tokens and are never kept, so a second attempt would run
/// again (`409 email_taken` for a sign-up that worked). Those POSTs go without a key, which keeps the
/// retries from sending them twice; the refresh and an invitation's acceptance, which the server
/// answers again as it did the first time, are sent again all the same (`RetryPolicy.resentWithoutKey`).
struct IdempotencyMiddleware: ClientMiddleware {
    static let ignoredUnder = ["/v1/auth/", "/verify-email", "/reset-password", "/v1/invitations/"]

    static func serverIgnoresKey(_ request: HTTPRequest) -> Bool {
        let path = request.path.map { $0.prefix { $0 != "?" } } ?? ""
        return ignoredUnder.contains { path.hasPrefix($0) }
    }

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        var request = request
        if request.method == .post {
            if Self.serverIgnoresKey(request) {
                request.headerFields[.idempotencyKey] = nil
            } else if request.headerFields[.idempotencyKey] == nil {
                request.headerFields[.idempotencyKey] = UUID().uuidString
            }
        }
        return try await next(request, body, baseURL)
    }
}

/// The generator's runtime writes header parameters percent-encoded (apple/swift-openapi-generator#857),
/// which turns an ETag's quotes into `%22` and makes every `If-Match` a mismatch: these headers are
/// sent as the app gave them.
struct PlainHeadersMiddleware: ClientMiddleware {
    static let names: [HTTPField.Name] = [.ifMatch, .ifNoneMatch, HTTPField.Name("Last-Event-ID")!]

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        var request = request
        for name in Self.names {
            if let value = request.headerFields[name], let plain = value.removingPercentEncoding { request.headerFields[name] = plain }
        }
        return try await next(request, body, baseURL)
    }
}

/// An operation that takes any image (`image/*` in the document) is sent with the image's own type,
/// told from its first bytes, since the server checks the type it is given against the bytes.
struct ImageTypeMiddleware: ClientMiddleware {
    /// The most of an image read to tell its type; larger ones go as they are, for the server to refuse.
    static let limit = 64 * 1024 * 1024

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        guard request.headerFields[.contentType] == "image/*", let body else { return try await next(request, body, baseURL) }
        let data = try await Data(collecting: body, upTo: Self.limit)
        var typed = request
        if let kind = ImageKind(data) { typed.headerFields[.contentType] = kind.rawValue }
        return try await next(typed, HTTPBody(data), baseURL)
    }
}

/// A problem+json answer becomes a thrown `FoodBackendError`, so every operation's result is its
/// documented success or an error an app can switch on.
struct ProblemMiddleware: ClientMiddleware {
    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        let (response, responseBody) = try await next(request, body, baseURL)
        guard response.status.code >= 400 else { return (response, responseBody) }
        let data = try await collect(responseBody)
        let retryAfter = response.headerFields[.retryAfter].flatMap { Int($0) }
        if let problem = FoodBackendError.problem(status: response.status.code, body: data, retryAfter: retryAfter) {
            throw problem
        }
        throw FoodBackendError.unexpected("\(response.status.code) without a problem body", status: response.status.code)
    }
}

/// Sends the session's access token; when the server says it expired, waits for the one refresh
/// that every request holding that token shares, and sends the request again with the new token.
/// When the server says the session ended (`session_revoked`: signed out everywhere, a password
/// changed on another device; `account_deleted`: the account deleted on another), the app is
/// signed out, as a refused refresh signs it out: the session's tokens would be refused at its next
/// refresh anyway.
struct AuthMiddleware: ClientMiddleware {
    let sessions: SessionManager

    /// A token to sign with as it is, never refreshed: a session already forgotten here (a sign-out)
    /// told the server of its end.
    @TaskLocal static var signingWith: String?

    /// Operations that must not carry a token: the refresh itself and the sign-ins.
    static let anonymous: Set<String> = [
        "post/v1/auth/token/refresh", "post/v1/auth/login", "post/v1/auth/signup", "post/v1/auth/apple", "post/v1/auth/google",
    ]

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        if let token = Self.signingWith, !Self.anonymous.contains(operationID) {
            var signed = request
            signed.headerFields[.authorization] = "Bearer \(token)"
            return try await next(signed, body, baseURL)
        }
        guard !Self.anonymous.contains(operationID), request.headerFields[.authorization] == nil,
            let (token, session) = await sessions.signingToken()
        else {
            return try await next(request, body, baseURL)
        }
        var signed = request
        signed.headerFields[.authorization] = "Bearer \(token)"
        let (response, responseBody) = try await next(signed, body, baseURL)
        guard response.status == .unauthorized else { return (response, responseBody) }
        let data = try await collect(responseBody)
        switch FoodBackendError.problem(status: 401, body: data, retryAfter: nil)?.code {
        case .tokenExpired:
            break
        case .sessionRevoked, .accountDeleted:
            await sessions.ended(session)
            return (response, HTTPBody(data))
        default:
            return (response, HTTPBody(data))
        }
        // No token when another sign-in replaced the session meanwhile: the request was that session's.
        guard let fresh = try await sessions.refreshed(replacing: token, of: session) else { return (response, HTTPBody(data)) }
        signed.headerFields[.authorization] = "Bearer \(fresh)"
        return try await next(signed, body, baseURL)
    }
}

/// How often and how long the client itself retries a call that failed on the way: a connection
/// that dropped, or a 502, 503 or 504 (`Retry-After` honoured, up to `maximumDelay`) other than
/// the outcomes in `final`.
public struct RetryPolicy: Sendable {
    /// Problems a service answers with 502 or 503 once it has done the work: a meal photo's analysis
    /// whose model answered no use, or gave no answer in the whole timeout, stays counted against
    /// the day's allowance, and the server keeps no 5xx for the key. Sent again by the client, each
    /// attempt would be another analysis, counted, and another wait of up to the model's timeout:
    /// the caller decides.
    public static let final: Set<String> = ["analysis_failed", "analyzer_unavailable"]

    /// POSTs sent again without a key, as the server answers a second copy as it did the first: a
    /// refresh token already exchanged, sent again within `REFRESH_REUSE_GRACE_SECONDS` (60) while
    /// the tokens it was exchanged for are unused, gets new ones. A refresh whose answer was lost
    /// (the phone moving from Wi-Fi to cellular) is so sent again at once; left to the next `401`,
    /// minutes later, it would be `refresh_token_reused`, and the user signed out. An invitation's
    /// acceptance sent again by the person who accepted it gets the same answer, not `invitation_used`.
    static let resentWithoutKey: Set<String> = ["post/v1/auth/token/refresh", "post/v1/invitations/{code}/accept"]

    public var attempts: Int
    public var delay: Duration
    public var maximumDelay: Duration
    /// How long a POST whose key the server says is still in use (`409 idempotency_key_in_use`: an
    /// earlier attempt that lost its answer still runs) is sent again, `Retry-After` apart, counted
    /// from its first attempt.
    public var keyInUseBudget: Duration

    public init(attempts: Int = 3, delay: Duration = .milliseconds(300), maximumDelay: Duration = .seconds(5), keyInUseBudget: Duration = .seconds(30)) {
        self.attempts = attempts
        self.delay = delay
        self.maximumDelay = maximumDelay
        self.keyInUseBudget = keyInUseBudget
    }

    public static let `default` = RetryPolicy()
    public static let none = RetryPolicy(attempts: 1, keyInUseBudget: .zero)
}

struct RetryMiddleware: ClientMiddleware {
    let policy: RetryPolicy

    func intercept(
        _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
        next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
    ) async throws -> (HTTPResponse, HTTPBody?) {
        // A body that can be read once (a stream) cannot be sent again; neither can a POST without
        // its key, nor a PATCH, whose second application may differ.
        let replayable = body.map { $0.iterationBehavior == .multiple } ?? true
        let keyed = request.method == .post && request.headerFields[.idempotencyKey] != nil
        let safe = request.method != .patch && (request.method != .post || keyed || RetryPolicy.resentWithoutKey.contains(operationID))
        let attempts = replayable && safe ? max(1, policy.attempts) : 1
        // A conditional change (`If-Match`) whose answer was lost may have been made: sent again, it
        // would meet its own change as another's (`412`). Only a `503`, answered before any work
        // (the upstream or the database out of reach), sends it again. A keyed POST is answered
        // again as it was the first time (a training log's `If-Match` with its key), so it is not held.
        let conditional = request.headerFields[.ifMatch] != nil && !keyed
        let retriedStatuses: Set<Int> = conditional ? [503] : [502, 503, 504]
        let started = ContinuousClock.now
        var attempt = 1
        while true {
            do {
                let (response, responseBody) = try await next(request, body, baseURL)
                let retryAfter = response.headerFields[.retryAfter].flatMap { Int($0) }.map { Duration.seconds($0) }
                if keyed && replayable && response.status == .conflict {
                    // The server answers once per key: waiting for the first attempt to finish gets its answer.
                    let data = try await collect(responseBody)
                    let wait = retryAfter ?? policy.delay
                    guard FoodBackendError.problem(status: 409, body: data, retryAfter: nil)?.code == .idempotencyKeyInUse,
                        ContinuousClock.now + wait - started <= policy.keyInUseBudget
                    else { return (response, HTTPBody(data)) }
                    try await Task.sleep(for: wait)
                    continue
                }
                guard attempt < attempts, retriedStatuses.contains(response.status.code) else { return (response, responseBody) }
                let data = try await collect(responseBody)
                if let problem = FoodBackendError.problem(status: Int(response.status.code), body: data, retryAfter: nil), RetryPolicy.final.contains(problem.rawCode) {
                    return (response, HTTPBody(data))
                }
                let wait = retryAfter ?? policy.delay * attempt
                // The body was read: handed on as read (a transport's body can be read once).
                guard wait <= policy.maximumDelay else { return (response, HTTPBody(data)) }
                try await Task.sleep(for: wait)
            } catch let error as FoodBackendError {
                throw error
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                guard attempt < attempts, !conditional else { throw error }
                try await Task.sleep(for: policy.delay * attempt)
            }
            attempt += 1
        }
    }
}
