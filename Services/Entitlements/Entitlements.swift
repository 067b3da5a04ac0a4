import AppStoreServer
import Foundation
import Logging
import Models
import PostgresNIO
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP

/// The entitlements domain: the catalogue, the stores, the App Store verifier, the clock, and the
/// rules the routes share.
struct Entitlements: Sendable {
    let postgres: PostgresClient
    let outbox: EventOutbox
    let settings: EntitlementsSettings
    let catalog: Catalog
    let verifier: SignedDataVerifier
    let logger: Logger
    /// Now, injectable so tests can move time past an expiry or a grace period.
    let clock: @Sendable () -> Date
    let store = EntitlementStore()
    let subscriptions = SubscriptionStore()
    let usage = UsageStore()
    let grants = GrantStore()
    /// Each user's inputs for the version they were read at (`entitlement_versions`): `/me` and every
    /// check read one number instead of the subscriptions, grants and usage while nothing changed.
    let keptInputs: VersionedCache<UUID, EntitlementInputs>?

    init(dependencies: ServiceDependencies, settings: EntitlementsSettings, catalog: Catalog, clock: @escaping @Sendable () -> Date) throws {
        postgres = dependencies.postgres
        outbox = dependencies.outbox
        self.settings = settings
        self.catalog = catalog
        verifier = try SignedDataVerifier(settings.appStore)
        logger = dependencies.logger
        self.clock = clock
        keptInputs = settings.inputsCacheSize > 0 ? VersionedCache(capacity: settings.inputsCacheSize) : nil
    }

    /// The user's entitlement now, derived at read time.
    func current(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Entitlement {
        try await snapshot(user, on: connection, logger: logger).entitlement
    }

    /// The entitlement with the inputs it came from (token, usage).
    func snapshot(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> (entitlement: Entitlement, inputs: EntitlementInputs) {
        let inputs = try await store.inputs(user, on: connection, logger: logger)
        return (Entitlement.derive(subscriptions: inputs.subscriptions, grants: inputs.grants, catalog: catalog, now: clock()), inputs)
    }

    /// `snapshot` from kept inputs when the user's version has not moved since they were read. Only
    /// outside a transaction: one that wrote reads its own new version, and what it read then could
    /// be kept under that version before its later writes (which do not move it again).
    func snapshotOutsideTransaction(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> (entitlement: Entitlement, inputs: EntitlementInputs) {
        guard let keptInputs else { return try await snapshot(user, on: connection, logger: logger) }
        let version = try await store.version(user, on: connection, logger: logger)
        let inputs = try await keptInputs.value(for: user, version: version) { try await store.inputs(user, on: connection, logger: logger) }
        return (Entitlement.derive(subscriptions: inputs.subscriptions, grants: inputs.grants, catalog: catalog, now: clock()), inputs)
    }

    /// Runs `change` and announces `entitlement.changed` for each of `users` whose tier, state or
    /// features it changed, in the same transaction.
    func announcingChanges<Result: Sendable>(
        for users: [UUID], on connection: PostgresConnection, logger: Logger, _ change: () async throws -> Result
    ) async throws -> Result {
        var before: [UUID: EntitlementSummary] = [:]
        for user in Set(users) { before[user] = try await current(user, on: connection, logger: logger).summary }
        let result = try await change()
        for user in Set(users) {
            let after = try await current(user, on: connection, logger: logger)
            if after.summary != before[user] {
                // Live too: the user's apps unlock (or lock) features without polling.
                try await outbox.write(
                    EntitlementChanged(userID: user, tier: after.tier, state: after.state.rawValue, features: after.features), userID: user, live: true,
                    on: connection, logger: logger)
            }
        }
        return result
    }

    /// `403 requires_upgrade` for a feature the caller's tier lacks, in the catalogue's words.
    func upgradeProblem(feature: String) -> APIError {
        let name = catalog.features[feature]?.name ?? feature
        let tierID = catalog.features[feature]?.upgradeTier ?? catalog.lowestTier(with: feature)?.id ?? "pro"
        let tierName = catalog.tier(tierID)?.name ?? tierID
        return APIError(
            .forbidden, code: "requires_upgrade", detail: "\(name) requires \(tierName). Upgrade to unlock.",
            extensions: ["feature": .string(feature), "required_tier": .string(tierID)])
    }
}
