import Foundation
import Hummingbird
import ServiceKit

/// Administrators give tiers (support, reviewers, partners) and ask why a user has the tier they have.
struct AdminRoutes {
    let entitlements: Entitlements

    func add(to router: Router<ServiceRequestContext>) {
        let admin = router.group("v1/admin/entitlements", context: AuthenticatedContext.self)
        admin.post(":user_id/grants", use: grant)
        admin.delete(":user_id/grants/:grant_id", use: revoke)
        admin.get(":user_id/explain", use: explain)
    }

    struct GrantRequest: StrictJSONBody {
        var tier: String
        var until: Date
        var reason: String
        enum CodingKeys: String, CodingKey, CaseIterable { case tier, until, reason }
    }

    struct GrantView: ResponseEncodable {
        var id: UUID
        var userID: UUID
        var tier: String
        var until: Date
        var reason: String
        var grantedBy: UUID
        var createdAt: Date
        enum CodingKeys: String, CodingKey {
            case id, userID = "user_id", tier, until, reason, grantedBy = "granted_by", createdAt = "created_at"
        }
    }

    /// Also a deleted account's: grants for an account that is gone are refused.
    static let noUser = APIError.notFound("No such user.", code: "user_not_found")

    func userID(_ context: AuthenticatedContext) throws -> UUID {
        guard let id = context.parameters.get("user_id").flatMap(UUID.init(parsing:)) else { throw Self.noUser }
        return id
    }

    @Sendable func grant(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<GrantView> {
        try await entitlements.liveAdmin(context)
        let user = try userID(context)
        let body = try await request.decode(as: GrantRequest.self, context: context)
        let entitlements = self.entitlements
        var problems: [Problem.FieldError] = []
        if entitlements.catalog.tier(body.tier) == nil || body.tier == Catalog.freeTier {
            let paid = entitlements.catalog.tiers.filter { $0.id != Catalog.freeTier }.map(\.id)
            problems.append(.init(field: "tier", message: "must be one of \(paid.joined(separator: ", "))"))
        }
        let now = entitlements.clock()
        if body.until <= now || body.until > now + 10 * 366 * 86_400 { problems.append(.init(field: "until", message: "must be in the future, within ten years")) }
        let reason = body.reason.trimmingCharacters(in: .whitespacesAndNewlines)
        if reason.isEmpty || body.reason.unicodeScalars.count > 500 { problems.append(.init(field: "reason", message: "must be 1 to 500 characters")) }
        if !problems.isEmpty { throw APIError.validation(problems) }
        let admin = context.caller.userID
        let grant = try await entitlements.postgres.transaction(logger: context.logger) { connection in
            // The account held first, with its customer row: a deletion running now waits for this
            // transaction (and removes the grant), or has committed its tombstone, which this sees.
            // An id that names no account known here (a typo) makes no row for nobody.
            guard try await connection.holdLiveAccount(user, logger: context.logger),
                try await entitlements.store.isCustomer(user, on: connection, logger: context.logger)
            else { throw Self.noUser }
            return try await entitlements.announcingChanges(for: [user], on: connection, logger: context.logger) {
                try await entitlements.grants.insert(user: user, tier: body.tier, until: body.until, reason: reason, by: admin, on: connection, logger: context.logger)
            }
        }
        return EditedResponse(
            status: .created,
            response: GrantView(
                id: grant.id, userID: user, tier: grant.tier, until: grant.until, reason: grant.reason, grantedBy: grant.grantedBy, createdAt: grant.createdAt))
    }

    @Sendable func revoke(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        try await entitlements.liveAdmin(context)
        let user = try userID(context)
        let notFound = APIError.notFound("No such grant.", code: "grant_not_found")
        guard let id = context.parameters.get("grant_id").flatMap(UUID.init(parsing:)) else { throw notFound }
        let entitlements = self.entitlements
        let admin = context.caller.userID
        let revoked = try await entitlements.postgres.transaction(logger: context.logger) { connection in
            // A deleted account is no user to an admin (not the caller's own 401), and an id that
            // names no account known here makes no row for nobody, as for a grant.
            guard try await connection.holdLiveAccount(user, logger: context.logger),
                try await entitlements.store.isCustomer(user, on: connection, logger: context.logger)
            else { throw Self.noUser }
            return try await entitlements.announcingChanges(for: [user], on: connection, logger: context.logger) {
                try await entitlements.grants.revoke(id, of: user, by: admin, on: connection, logger: context.logger)
            }
        }
        guard revoked else { throw notFound }
        return .noContent
    }

    struct CandidateView: Encodable, Sendable {
        var kind: String
        var id: String
        var tier: String?
        var state: String
        var expiresAt: Date?
        var counts: Bool
        var reason: String
        enum CodingKeys: String, CodingKey { case kind, id, tier, state, expiresAt = "expires_at", counts, reason }
    }

    struct Explanation: ResponseEncodable {
        var userID: UUID
        var entitlement: EntitlementView
        var derivation: String
        var candidates: [CandidateView]
        var history: [SubscriptionStore.HistoryEntry]
        enum CodingKeys: String, CodingKey { case userID = "user_id", entitlement, derivation, candidates, history }
    }

    /// The user's ordered history (purchases, notifications, grants) and how the tier was derived.
    @Sendable func explain(_ request: Request, context: AuthenticatedContext) async throws -> Explanation {
        try await entitlements.liveAdmin(context)
        let user = try userID(context)
        let entitlements = self.entitlements
        // One snapshot: the tier and its derivation are those of the history shown beside them.
        return try await entitlements.postgres.snapshot(logger: context.logger) { connection in
            guard try await !connection.isDeletedAccount(user, logger: context.logger),
                try await entitlements.store.isCustomer(user, on: connection, logger: context.logger)
            else { throw Self.noUser }
            let (entitlement, inputs) = try await entitlements.snapshot(user, on: connection, logger: context.logger)
            let history = try await entitlements.subscriptions.history(of: user, on: connection, logger: context.logger)
            return Explanation(
                userID: user, entitlement: EntitlementView(entitlement, inputs: inputs), derivation: entitlement.derivation,
                candidates: entitlement.candidates.map {
                    CandidateView(kind: $0.kind.rawValue, id: $0.id, tier: $0.tier, state: $0.state.rawValue, expiresAt: $0.expiresAt, counts: $0.counts, reason: $0.reason)
                }, history: history)
        }
    }
}
