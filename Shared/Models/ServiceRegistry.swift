// Generated from services.txt by `scripts/services generate`; `scripts/services check` (which
// scripts/test runs) fails when this file differs. Edit the table, not this file.

/// The services behind the gateway, as services.txt lists them: the gateway's upstreams and
/// routes come from here, and each service's default port.
public enum ServiceRegistry {
    /// One service.
    public struct Entry: Sendable, Hashable {
        /// Its executable, schema, login role, and the stem of the gateway's `<NAME>_URL`.
        public let name: String
        /// Its default public port (`HTTP_PORT`), where the gateway's default `<NAME>_URL` points.
        public let port: Int
        /// The paths the gateway sends to it, matched on whole segments.
        public let prefixes: [String]
    }

    public static let auth = Entry(name: "auth", port: 8081, prefixes: ["/v1/auth", "/v1/admin/users", "/.well-known/jwks.json", "/verify-email", "/reset-password"])
    public static let social = Entry(name: "social", port: 8082, prefixes: ["/v1/profiles", "/v1/follow-requests", "/v1/blocks", "/v1/mutes", "/v1/notifications", "/v1/moderation"])
    public static let invitations = Entry(name: "invitations", port: 8083, prefixes: ["/v1/clients", "/v1/invitations", "/v1/coach", "/invite"])
    public static let entitlements = Entry(
        name: "entitlements", port: 8084,
        prefixes: [
            "/v1/admin/entitlements",
            "/v1/entitlements",
            "/v1/tiers",
            "/v1/usage",
            "/v1/purchases",
            "/v1/webhooks/app-store",
            "/v1/spaces",
        ])
    public static let nutrition = Entry(name: "nutrition", port: 8085, prefixes: ["/v1/nutrition", "/v1/meals", "/v1/foods", "/v1/metrics", "/v1/trends", "/v1/shared", "/shared"])
    public static let training = Entry(name: "training", port: 8086, prefixes: ["/v1/training", "/v1/exercises", "/v1/workouts"])

    /// Every service, in the table's order.
    public static let all: [Entry] = [auth, social, invitations, entitlements, nutrition, training]
}
