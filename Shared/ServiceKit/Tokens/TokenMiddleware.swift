import Hummingbird
import ServiceKitCore
import ServiceKitHTTP

/// Reads `Authorization: Bearer …` and, when it verifies, puts the caller in the context. A request
/// with no token passes through anonymous (routes that need a caller use `AuthenticatedContext`).
/// A bad or expired token is never taken for anonymous by a route that needs a caller: its problem
/// (401 `invalid_token`, `token_expired`) is kept in the context and is that route's answer. Routes
/// that need none (refresh, sign-in, sign-up, the mailed links) ignore it: an app that sends its
/// last access token with every request would otherwise be refused the refresh that renews it.
public struct TokenMiddleware<Context: IdentifiedRequestContext>: RouterMiddleware {
    let verifier: TokenVerifier

    public init(verifier: TokenVerifier) {
        self.verifier = verifier
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let authorization = request.headers[.authorization] else {
            return try await next(request, context)
        }
        var context = context
        guard let token = Self.bearerToken(authorization) else {
            context.tokenProblem = APIError.unauthorized("Use `Authorization: Bearer <access token>`.", code: "invalid_token")
            return try await next(request, context)
        }
        // The gateway heard this token's session end (or its account deleted): a route that needs a
        // caller answers so, one that needs none goes on as without a token. Anyone else sending the
        // header only has their own request refused; the gateway drops a client's.
        if request.headers[.sessionEnded] != nil {
            context.tokenProblem = Self.sessionEnded
            return try await next(request, context)
        }
        do {
            context.caller = try await verifier.verify(token)
        } catch {
            context.tokenProblem = error.apiError
            return try await next(request, context)
        }
        // Formatted only if a line is logged: UUID's description goes through snprintf.
        context.logger[metadataKey: "user_id"] = .stringConvertible(context.caller!.userID)
        return try await next(request, context)
    }

    static var sessionEnded: APIError { APIError.unauthorized("This session has ended; sign in again.", code: "session_revoked") }

    /// The token of `Bearer <token>` (scheme in any case, blanks around the token ignored). Works on
    /// the UTF-8 bytes: this runs on every request, and Character iteration over a 600-byte token
    /// (grapheme breaking) cost more than checking its signature.
    public static func bearerToken(_ header: String) -> String? {
        let bytes = header.utf8
        guard let space = bytes.firstIndex(of: UInt8(ascii: " ")) else { return nil }
        let scheme = bytes[..<space]
        guard scheme.count == 6, zip(scheme, "bearer".utf8).allSatisfy({ ($0 | 0x20) == $1 }) else { return nil }
        let isBlank: (UInt8) -> Bool = { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
        var rest = bytes[bytes.index(after: space)...]
        while let first = rest.first, isBlank(first) { rest = rest.dropFirst() }
        while let last = rest.last, isBlank(last) { rest = rest.dropLast() }
        guard !rest.isEmpty else { return nil }
        return String(Substring(rest))
    }
}
