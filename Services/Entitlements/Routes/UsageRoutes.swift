import Foundation
import Hummingbird
import ServiceKit

/// Usage counted against the tier's limits. The count is as honest as its callers: the app or a
/// service acquires before it creates a thing and releases the acquisitions of what it removes;
/// a caller can only release its own acquisitions, never an arbitrary amount.
struct UsageRoutes {
    let entitlements: Entitlements

    func add(to router: Router<ServiceRequestContext>) {
        let usage = router.group("v1/usage", context: AuthenticatedContext.self)
        usage.post(":counter/acquire", use: acquire)
        usage.post(":counter/release", use: release)
    }

    struct AcquireRequest: StrictJSONBody {
        var amount: Int?
        enum CodingKeys: String, CodingKey, CaseIterable { case amount }
    }

    struct Acquired: ResponseEncodable {
        var acquisitionID: UUID
        var used: Int
        @Nullable var limit: Int?
        enum CodingKeys: String, CodingKey { case acquisitionID = "acquisition_id", limit, used }
    }

    /// The counter the path names: a limit of the catalogue counted here. A limit another service
    /// counts (per day, say) has no counter here: one kept here would never start a new day.
    func counter(_ context: AuthenticatedContext) throws -> String {
        let catalog = entitlements.catalog
        let counted = catalog.limits.filter { $0.value.countedBy == nil }.keys.sorted().joined(separator: ", ")
        guard let name = context.parameters.get("counter"), let limit = catalog.limits[name] else {
            throw APIError.notFound("There is no such usage counter; known: \(counted).", code: "unknown_counter")
        }
        if let service = limit.countedBy {
            throw APIError.notFound(
                "\(name) is counted by the \(service) service, as each use happens; it has no counter here (known: \(counted)).", code: "unknown_counter")
        }
        return name
    }

    /// Takes `amount` (default 1) of the counter if the tier's limit allows; `Idempotency-Key` makes
    /// a retried acquisition answer as the first did instead of counting twice.
    @Sendable func acquire(_ request: Request, context: AuthenticatedContext) async throws -> Acquired {
        let counter = try counter(context)
        let body = try await request.decodeIfPresent(as: AcquireRequest.self, context: context)
        let amount = body?.amount ?? 1
        guard (1...10_000).contains(amount) else { throw APIError.validation([.init(field: "amount", message: "must be 1 to 10000")]) }
        let entitlements = self.entitlements
        let user = context.caller.userID
        return try await entitlements.postgres.transaction(logger: context.logger) { connection in
            try await connection.requireLiveAccount(user, logger: context.logger)
            entitlements.forgetKeptAfterCommit([user])
            let (entitlement, inputs) = try await entitlements.snapshot(user, on: connection, logger: context.logger)
            let cap = entitlement.caps[counter] ?? nil
            guard let (id, used) = try await entitlements.usage.acquire(amount, of: counter, by: user, cap: cap, on: connection, logger: context.logger) else {
                throw entitlements.limitProblem(counter, cap: cap ?? 0, used: inputs.used[counter] ?? 0)
            }
            return Acquired(acquisitionID: id, used: used, limit: cap)
        }
    }

    struct ReleaseRequest: StrictJSONBody {
        var acquisitionIDs: [UUID]
        enum CodingKeys: String, CodingKey, CaseIterable { case acquisitionIDs = "acquisition_ids" }
    }

    struct Released: ResponseEncodable {
        var released: [UUID]
        var used: Int
        @Nullable var limit: Int?
        enum CodingKeys: String, CodingKey { case limit, released, used }
    }

    /// Gives back exactly those acquisitions of the caller's; others (another user's, released
    /// already, unknown) are left out of `released`.
    @Sendable func release(_ request: Request, context: AuthenticatedContext) async throws -> Released {
        let counter = try counter(context)
        let body = try await request.decode(as: ReleaseRequest.self, context: context)
        guard (1...100).contains(body.acquisitionIDs.count) else {
            throw APIError.validation([.init(field: "acquisition_ids", message: "must list 1 to 100 acquisitions")])
        }
        let entitlements = self.entitlements
        let user = context.caller.userID
        return try await entitlements.postgres.transaction(logger: context.logger) { connection in
            entitlements.forgetKeptAfterCommit([user])
            let (released, used) = try await entitlements.usage.release(Array(Set(body.acquisitionIDs)), of: counter, by: user, on: connection, logger: context.logger)
            let cap = try await entitlements.current(user, on: connection, logger: context.logger).caps[counter] ?? nil
            return Released(released: released, used: used, limit: cap)
        }
    }
}

extension Entitlements {
    /// `403 limit_exceeded`, in the catalogue's words.
    func limitProblem(_ counter: String, cap: Int, used: Int) -> APIError {
        let limit = catalog.limits[counter]
        let tierID = limit?.upgradeTier ?? "pro"
        let tierName = catalog.tier(tierID)?.name ?? tierID
        let upgraded = catalog.tier(tierID).map { catalog.cap(counter, in: $0) }
        let what = upgraded.map { $0 == nil ? "unlimited" : "more" } ?? "more"
        return APIError(
            .forbidden, code: "limit_exceeded", detail: "You've reached the limit of \(cap) \(limit?.name ?? counter). Upgrade to \(tierName) for \(what).",
            extensions: ["limit": .number(Double(cap)), "used": .number(Double(used)), "upgrade_tier": .string(tierID), "counter": .string(counter)])
    }
}
