import AppStoreServer
import Foundation
import Logging
import PostgresNIO
import ServiceKit

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
    let subscriptions: SubscriptionStore
    let usage = UsageStore()
    let grants = GrantStore()
    /// Each user's inputs for the version they were read at (`entitlement_versions`): `/me` and every
    /// check read one number instead of the subscriptions, grants and usage while nothing changed.
    let keptInputs: VersionedCache<UUID, EntitlementInputs>?
    /// Each change of a user's inputs as it commits, in every process: while it vouches, kept inputs
    /// are served without reading their version.
    let changes: ChangeFeed?

    init(dependencies: ServiceDependencies, settings: EntitlementsSettings, catalog: Catalog, clock: @escaping @Sendable () -> Date) throws {
        postgres = dependencies.postgres
        outbox = dependencies.outbox
        self.settings = settings
        subscriptions = SubscriptionStore(acceptsSandbox: settings.acceptsSandbox)
        self.catalog = catalog
        let chainChecks = dependencies.metrics.makeCounter(
            descriptor: .init(metricName: "app_store_chain_checks", unitName: "total", helpText: "App Store certificate chains parsed and checked (payloads that passed the cheaper checks)"))
        verifier = try SignedDataVerifier(settings.appStore, onChainCheck: { chainChecks.increment() })
        logger = dependencies.logger
        self.clock = clock
        if settings.inputsCacheSize > 0 {
            let keptInputs = VersionedCache<UUID, EntitlementInputs>(capacity: settings.inputsCacheSize)
            self.keptInputs = keptInputs
            if settings.changeFeed {
                // The channel the migration's trigger function names (`0006`).
                changes = try ChangeFeed(
                    forgetting: keptInputs, channel: ChangeFeed.channel(schema: dependencies.config.database.schema, "entitlement_inputs"),
                    database: dependencies.config.database, pool: dependencies.postgres, logger: dependencies.logger)
            } else {
                changes = nil
            }
        } else {
            keptInputs = nil
            changes = nil
        }
    }

    /// The user's entitlement now, derived at read time.
    func current(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> Entitlement {
        try await snapshot(user, on: connection, logger: logger).entitlement
    }

    /// The entitlement with the inputs it came from (token, usage).
    func snapshot(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> (entitlement: Entitlement, inputs: EntitlementInputs) {
        let inputs = try await store.inputs(user, on: connection, logger: logger)
        return (Entitlement.derive(subscriptions: inputs.subscriptions, grants: inputs.grants, catalog: catalog, acceptsSandbox: settings.acceptsSandbox, now: clock()), inputs)
    }

    /// `snapshot` from kept inputs: as they are while the change feed vouches that nothing of the
    /// user's changed since, else when the user's version has not moved since they were read. Only
    /// outside a transaction (it takes its own connection when it needs one): one that wrote reads
    /// its own new version, and what it read then could be kept under that version before its later
    /// writes (which do not move it again).
    func snapshotOutsideTransaction(_ user: UUID, logger: Logger) async throws -> (entitlement: Entitlement, inputs: EntitlementInputs) {
        guard let keptInputs else {
            return try await postgres.withConnectionOnItsLoop { connection in try await snapshot(user, on: connection, logger: logger) }
        }
        let inputs: EntitlementInputs
        if changes?.vouches == true, let kept = keptInputs.latest(for: user) {
            inputs = kept
        } else {
            inputs = try await postgres.withConnectionOnItsLoop { connection in
                let epoch = keptInputs.epoch(for: user)
                let version = try await store.version(user, on: connection, logger: logger)
                return try await keptInputs.value(for: user, version: version, unlessForgottenSince: epoch) { try await store.inputs(user, on: connection, logger: logger) }
            }
        }
        return (Entitlement.derive(subscriptions: inputs.subscriptions, grants: inputs.grants, catalog: catalog, acceptsSandbox: settings.acceptsSandbox, now: clock()), inputs)
    }

    /// Forgets the inputs this process kept for `users` once the current transaction commits, so the
    /// request that changed them reads the change next, here, without waiting for the change feed.
    func forgetKeptAfterCommit(_ users: some Sequence<UUID>) {
        guard let keptInputs else { return }
        for user in Set(users) { WorkBell.runAfterCommit { keptInputs.forget(user) } }
    }

    /// Runs `change` and announces `entitlement.changed` for each of `users` whose tier, state or
    /// features differ from what was last announced of them (or, for a user never announced, from
    /// before the change), in the same transaction; and records what was announced and when the
    /// user's entitlement next changes by the clock alone, for `ExpiryAnnouncer`.
    func announcingChanges<Result: Sendable>(
        for users: [UUID], on connection: PostgresConnection, logger: Logger, _ change: () async throws -> Result
    ) async throws -> Result {
        forgetKeptAfterCommit(users)
        // What was announced of them is held until the transaction ends, in one order: a sweep skips
        // it, and a change beside this one waits and then reads what this one announced.
        let users = Set(users).sorted { $0.uuidString < $1.uuidString }
        try await connection.checkedRun(
            "SELECT 1 FROM entitlement_announcements WHERE user_id = ANY(\(users)) ORDER BY user_id FOR UPDATE", logger: logger)
        var before: [UUID: EntitlementSummary] = [:]
        for user in users { before[user] = try await current(user, on: connection, logger: logger).summary }
        let result = try await change()
        for user in users {
            let (after, inputs) = try await snapshot(user, on: connection, logger: logger)
            let fingerprint = after.summary.fingerprint
            let changed: Bool
            switch try await announcedFingerprint(of: user, on: connection, logger: logger) {
            case .some(.some(let last)): changed = last != fingerprint
            case .some(.none): changed = true
            case .none: changed = after.summary != before[user]
            }
            if changed { try await announce(after, of: user, on: connection, logger: logger) }
            let next = Entitlement.nextChange(subscriptions: inputs.subscriptions, grants: inputs.grants, after: clock())
            // Whether the user's sandbox purchases counted (none held: NULL), for the sweep to look
            // again once a start with the other `APPLE_ACCEPT_SANDBOX` makes them count or not.
            let sandboxCounted: Bool? = inputs.subscriptions.contains { $0.isAppStoreSandbox } ? settings.acceptsSandbox : nil
            try await connection.checkedRun(
                """
                INSERT INTO entitlement_announcements (user_id, fingerprint, next_change_at, sandbox_counted) VALUES (\(user), \(fingerprint), \(next), \(sandboxCounted))
                ON CONFLICT (user_id) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, next_change_at = EXCLUDED.next_change_at, sandbox_counted = EXCLUDED.sandbox_counted
                """, logger: logger)
        }
        return result
    }

    /// What was last announced of `user`: nil when nothing is recorded, `.some(nil)` when the user is
    /// recorded as not known (announced at the next look).
    private func announcedFingerprint(of user: UUID, on connection: PostgresConnection, logger: Logger) async throws -> String?? {
        for try await fingerprint in try await connection.checkedQuery(
            "SELECT fingerprint FROM entitlement_announcements WHERE user_id = \(user)", logger: logger
        ).decode(String?.self) {
            return .some(fingerprint)
        }
        return nil
    }

    /// Writes `entitlement.changed` for `user` as they stand now. Live too: the user's apps unlock
    /// (or lock) features without polling.
    func announce(_ entitlement: Entitlement, of user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await outbox.write(entitlement.changedEvent(of: user, catalog: catalog), userID: user, live: true, on: connection, logger: logger)
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
