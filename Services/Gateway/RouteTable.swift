/// Which service answers which path prefix (the table in ARCHITECTURE.md). A prefix matches whole
/// path segments: `/v1/auth` takes `/v1/auth` and `/v1/auth/login`, never `/v1/authors`.
struct RouteTable: Sendable {
    static let standard = RouteTable(routes: [
        ("/v1/auth", "auth"), ("/v1/admin/users", "auth"), ("/.well-known/jwks.json", "auth"),
        ("/v1/profiles", "social"), ("/v1/follow-requests", "social"), ("/v1/blocks", "social"),
        ("/v1/mutes", "social"), ("/v1/notifications", "social"), ("/v1/moderation", "social"),
        ("/v1/clients", "invitations"), ("/v1/invitations", "invitations"), ("/v1/coach", "invitations"),
        ("/v1/entitlements", "entitlements"), ("/v1/tiers", "entitlements"), ("/v1/usage", "entitlements"),
        ("/v1/purchases", "entitlements"), ("/v1/webhooks/app-store", "entitlements"), ("/v1/spaces", "entitlements"),
        ("/v1/nutrition", "nutrition"), ("/v1/meals", "nutrition"), ("/v1/metrics", "nutrition"),
        ("/v1/trends", "nutrition"), ("/v1/shared", "nutrition"),
    ])

    /// Longest prefix first, so a more specific route wins.
    let routes: [(prefix: String, service: String)]

    init(routes: [(String, String)]) {
        self.routes = routes.map { (prefix: $0.0, service: $0.1) }.sorted { $0.prefix.count > $1.prefix.count }
    }

    func service(for path: String) -> String? {
        for route in routes where path.hasPrefix(route.prefix) {
            let rest = path.dropFirst(route.prefix.count)
            if rest.isEmpty || rest.hasPrefix("/") { return route.service }
        }
        return nil
    }
}
