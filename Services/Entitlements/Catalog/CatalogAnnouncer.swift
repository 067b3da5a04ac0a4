import Foundation
import Logging
import PostgresNIO
import ServiceKit
import ServiceLifecycle

/// Tells the other services what the catalogue gives once it changes: a start with a catalogue
/// other than the one last announced writes `entitlement.catalog_changed` (what a user nothing
/// names has) and the `entitlement.changed` of every user whose tier the change touched, in one
/// transaction. What was announced is kept per tier in `catalog_announcements`, so each change is
/// announced once, even when replicas start together; the first start announces everything, which
/// is how services that keep caps learn those of users who bought before caps were carried.
struct CatalogAnnouncer: Service {
    let catalog: Catalog
    /// `EntitlementsSettings.acceptsSandbox`: whether a sandbox subscription gives its tier.
    let acceptsSandbox: Bool
    let postgres: PostgresClient
    let outbox: EventOutbox
    let schema: String
    let clock: @Sendable () -> Date
    let logger: Logger
    let store = EntitlementStore()

    /// One tier as announced: what a change of it would change for its users.
    struct TierAnnouncement: Codable, Equatable {
        var rank: Int
        var features: [String]
        var limits: [String: Int?]
        var limitUpgrades: [String: String]
        var products: [String]
    }

    func announcement(of tier: Catalog.Tier) -> TierAnnouncement {
        TierAnnouncement(
            rank: tier.rank, features: tier.features.sorted(), limits: catalog.caps(of: tier),
            limitUpgrades: catalog.limitUpgrades(from: tier).mapValues(\.tier), products: tier.products.sorted())
    }

    func run() async throws {
        // A database that is down at start is retried; the service serves meanwhile, and the users
        // hear of the change once it is back.
        await cancelWhenGracefulShutdown {
            var delay = Duration.seconds(1)
            while !Task.isCancelled {
                do {
                    try await announceIfChanged()
                    return
                } catch {
                    logger.error("announcing the catalogue failed; retrying", metadata: ["error": "\(String(reflecting: error))"])
                    try? await Task.sleep(for: delay)
                    delay = min(delay * 2, .seconds(60))
                }
            }
        }
        try? await gracefulShutdown()
    }

    /// Announces what changed since the last announcement; returns the users told.
    @discardableResult
    func announceIfChanged() async throws -> Int {
        let catalog = self.catalog
        let logger = self.logger
        return try await postgres.transaction(logger: logger) { connection in
            try await connection.checkedRun("SET LOCAL statement_timeout = 0", logger: logger)
            try await connection.checkedRun("SELECT pg_advisory_xact_lock(hashtext(\(schema + ".catalog_announcements")))", logger: logger)
            var announced: [String: TierAnnouncement] = [:]
            for try await (tier, summary) in try await connection.checkedQuery("SELECT tier, summary::text FROM catalog_announcements", logger: logger)
                .decode((String, String).self)
            {
                // One the decoder no longer reads counts as changed.
                announced[tier] = try? JSONDecoder().decode(TierAnnouncement.self, from: Data(summary.utf8))
            }
            var now: [String: TierAnnouncement] = [:]
            for tier in catalog.tiers { now[tier.id] = announcement(of: tier) }
            let changed = Set(now.keys.filter { announced[$0] != now[$0] })
            let removed = Set(announced.keys).subtracting(now.keys)
            guard !changed.isEmpty || !removed.isEmpty || announced.count != now.count else { return 0 }
            // Products moved, ranks changed or a tier went: anyone holding a purchase or a grant may
            // have changed tier, whatever tier they now derive.
            let reshuffled = !removed.isEmpty || changed.contains { id in announced[id].map { $0.products != now[id]!.products || $0.rank != now[id]!.rank } ?? false }
            var told = 0
            if changed.contains(catalog.free.id) {
                let free = Entitlement.derive(subscriptions: [], grants: [], catalog: catalog, acceptsSandbox: acceptsSandbox, now: clock())
                let users = try await connection.checkedQuery(
                    """
                    SELECT c.user_id FROM customers c
                    WHERE NOT EXISTS (SELECT 1 FROM subscriptions s WHERE s.user_id = c.user_id)
                      AND NOT EXISTS (SELECT 1 FROM grants g WHERE g.user_id = c.user_id)
                    """, logger: logger
                ).decode(UUID.self)
                var ids: [UUID] = []
                for try await user in users { ids.append(user) }
                for user in ids {
                    try await write(free, of: user, on: connection)
                    told += 1
                }
            }
            let holders = try await connection.checkedQuery(
                """
                SELECT c.user_id FROM customers c
                WHERE EXISTS (SELECT 1 FROM subscriptions s WHERE s.user_id = c.user_id)
                   OR EXISTS (SELECT 1 FROM grants g WHERE g.user_id = c.user_id)
                """, logger: logger
            ).decode(UUID.self)
            var holderIDs: [UUID] = []
            for try await user in holders { holderIDs.append(user) }
            for user in holderIDs {
                let inputs = try await store.inputs(user, on: connection, logger: logger)
                let entitlement = Entitlement.derive(subscriptions: inputs.subscriptions, grants: inputs.grants, catalog: catalog, acceptsSandbox: acceptsSandbox, now: clock())
                guard reshuffled || changed.contains(entitlement.tier) else { continue }
                try await write(entitlement, of: user, on: connection)
                told += 1
            }
            try await outbox.write(
                EntitlementCatalogChanged(
                    defaultTier: catalog.free.id, features: catalog.features(of: catalog.free), limits: catalog.caps(of: catalog.free),
                    limitUpgrades: catalog.limitUpgrades(from: catalog.free)),
                userID: nil, on: connection, logger: logger)
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            for (tier, summary) in now {
                let text = String(decoding: try encoder.encode(summary), as: UTF8.self)
                try await connection.checkedRun(
                    """
                    INSERT INTO catalog_announcements (tier, summary) VALUES (\(tier), \(text)::jsonb)
                    ON CONFLICT (tier) DO UPDATE SET summary = EXCLUDED.summary, announced_at = now()
                    """, logger: logger)
            }
            for tier in removed {
                try await connection.checkedRun("DELETE FROM catalog_announcements WHERE tier = \(tier)", logger: logger)
            }
            logger.info(
                "announced the catalogue", metadata: ["tiers_changed": "\(changed.sorted().joined(separator: ","))", "users_told": "\(told)"])
            return told
        }
    }

    private func write(_ entitlement: Entitlement, of user: UUID, on connection: PostgresConnection) async throws {
        try await outbox.write(entitlement.changedEvent(of: user, catalog: catalog), userID: user, live: true, on: connection, logger: logger)
    }
}
