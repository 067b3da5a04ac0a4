import Hummingbird

/// Reads `Authorization: Bearer …` and, when it verifies, puts the caller in the context. A request
/// with no token passes through anonymous (routes that need a caller use `AuthenticatedContext`);
/// a request with a bad token is refused with 401, never treated as anonymous.
public struct TokenMiddleware<Context: IdentifiedRequestContext>: RouterMiddleware {
    let verifier: TokenVerifier

    public init(verifier: TokenVerifier) {
        self.verifier = verifier
    }

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let authorization = request.headers[.authorization] else {
            return try await next(request, context)
        }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw APIError.unauthorized("Use `Authorization: Bearer <access token>`.", code: "invalid_token")
        }
        var context = context
        do {
            context.caller = try await verifier.verify(String(parts[1].drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed()))
        } catch {
            throw error.apiError
        }
        context.logger[metadataKey: "user_id"] = "\(context.caller!.userID)"
        return try await next(request, context)
    }
}
