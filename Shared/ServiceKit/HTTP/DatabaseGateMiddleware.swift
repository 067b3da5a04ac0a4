import Hummingbird
import ServiceKitDatabase

/// Refuses requests with `503 service_unavailable` while the `DatabaseWatch` says PostgreSQL is out
/// of reach. Health, readiness and metrics still answer (they say why), and so do the well-known
/// documents and `/openapi.yaml`, which come from memory. Requests it lets through get a
/// `DatabaseBudget`: a wait for a pooled connection ends after `budget` (the statement timeout), or as
/// soon as the watch sees an outage, with the same 503.
package struct DatabaseGateMiddleware<Context: IdentifiedRequestContext>: RouterMiddleware {
    let watch: DatabaseWatch
    let budget: Duration

    package init(watch: DatabaseWatch, budget: Duration) {
        self.watch = watch
        self.budget = budget
    }

    package func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if !watch.isReachable && !Self.answersWithoutDatabase(request.uri.path) {
            throw APIError.databaseUnavailable
        }
        return try await DatabaseBudget.$current.withValue(DatabaseBudget(maxWait: budget, watch: watch)) {
            try await next(request, context)
        }
    }

    static func answersWithoutDatabase(_ path: String) -> Bool {
        ["/healthz", "/readyz", "/metrics", "/openapi.yaml"].contains(path) || path.hasPrefix("/.well-known/")
    }
}
