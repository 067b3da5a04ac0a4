import Foundation
import Hummingbird
import ServiceKit

/// The catalogue, the caller's entitlement, and the one question every app and service asks.
struct EntitlementRoutes {
    let entitlements: Entitlements

    func add(to router: Router<ServiceRequestContext>) {
        router.get("v1/tiers", use: tiers)
        let me = router.group("v1/entitlements", context: AuthenticatedContext.self)
        me.get("me", use: current)
        me.post("check", use: check)
    }

    struct TierView: Encodable, Sendable {
        var id: String
        var name: String
        var priceText: String
        var features: [String]
        /// `null` is unlimited: a dictionary writes its `nil` values, it does not leave them out.
        var limits: [String: Int?]
        var products: [String]

        enum CodingKeys: String, CodingKey { case features, id, limits, name, priceText = "price_text", products }
    }

    struct TierList: ResponseEncodable {
        var items: [TierView]
    }

    @Sendable func tiers(_ request: Request, context: ServiceRequestContext) async throws -> TierList {
        TierList(
            items: entitlements.catalog.tiers.sorted { $0.rank < $1.rank }.map {
                TierView(id: $0.id, name: $0.name, priceText: $0.priceText, features: $0.features, limits: $0.limits, products: $0.products)
            })
    }

    @Sendable func current(_ request: Request, context: AuthenticatedContext) async throws -> EntitlementView {
        let entitlements = self.entitlements
        let (entitlement, inputs) = try await entitlements.snapshotOutsideTransaction(context.caller.userID, logger: context.logger)
        return EntitlementView(entitlement, inputs: inputs)
    }

    struct CheckRequest: StrictJSONBody {
        var feature: String
        enum CodingKeys: String, CodingKey, CaseIterable { case feature }
    }

    struct Allowed: ResponseEncodable {
        var allowed: Bool
    }

    /// `200 {allowed: true}` or `403 requires_upgrade`; a feature the catalogue does not know is 404.
    @Sendable func check(_ request: Request, context: AuthenticatedContext) async throws -> Allowed {
        let body = try await request.decode(as: CheckRequest.self, context: context)
        let entitlements = self.entitlements
        guard entitlements.catalog.features[body.feature] != nil else {
            throw APIError(
                .notFound, code: "unknown_feature", detail: "There is no feature \"\(body.feature)\"; known: \(entitlements.catalog.features.keys.sorted().joined(separator: ", ")).")
        }
        let entitlement = try await entitlements.snapshotOutsideTransaction(context.caller.userID, logger: context.logger).entitlement
        guard entitlement.has(body.feature) else { throw entitlements.upgradeProblem(feature: body.feature) }
        return Allowed(allowed: true)
    }
}

/// `GET /v1/entitlements/me`, also what a purchase answers.
struct EntitlementView: ResponseEncodable, Sendable {
    struct LimitView: Encodable, Sendable {
        @Nullable var limit: Int?
        var used: Int
    }

    var tier: String
    var source: String
    var state: String
    @Nullable var expiresAt: Date?
    @Nullable var willRenew: Bool?
    var billingIssue: Bool
    var isSandbox: Bool
    var features: [String: Bool]
    var limits: [String: LimitView]
    var appAccountToken: UUID

    init(_ entitlement: Entitlement, inputs: EntitlementInputs) {
        tier = entitlement.tier
        source = entitlement.source.rawValue
        state = entitlement.state.rawValue
        expiresAt = entitlement.expiresAt
        willRenew = entitlement.willRenew
        billingIssue = entitlement.billingIssue
        isSandbox = entitlement.isSandbox
        features = entitlement.features
        limits = entitlement.caps.mapValues { _ in LimitView(limit: nil, used: 0) }
        for (name, cap) in entitlement.caps { limits[name] = LimitView(limit: cap, used: inputs.used[name] ?? 0) }
        appAccountToken = inputs.appAccountToken
    }

    enum CodingKeys: String, CodingKey {
        case appAccountToken = "app_account_token", billingIssue = "billing_issue", expiresAt = "expires_at", features, isSandbox = "is_sandbox", limits
        case source, state, tier, willRenew = "will_renew"
    }
}
