import Foundation
import Hummingbird
import ServiceKit

/// The entitlements service: tiers and feature gates, usage limits, App Store purchases and
/// server notifications, administrators' grants, and shared spaces with their permissions.
enum EntitlementsService {
    static let definition = configured(clock: { Date() })

    /// The service with its clock: tests pass one they can move.
    static func configured(clock: @escaping @Sendable () -> Date) -> ServiceDefinition {
        ServiceDefinition(
            name: "entitlements",
            defaultPort: ServiceRegistry.entitlements.port,
            migrations: { try ServiceDefinition.bundledMigrations(.module) },
            openAPIDocument: ServiceDefinition.bundledOpenAPIDocument(.module),
            setup: { config in
                let settings = try EntitlementsSettings(config)
                let catalog = try Catalog.load(path: settings.catalogPath)
                return ServiceSetup(build: { router, dependencies in
                    let entitlements = try Entitlements(dependencies: dependencies, settings: settings, catalog: catalog, clock: clock)
                    let spaces = SpaceStore()
                    EntitlementRoutes(entitlements: entitlements).add(to: router)
                    UsageRoutes(entitlements: entitlements).add(to: router)
                    PurchaseRoutes(entitlements: entitlements).add(to: router)
                    WebhookRoutes(entitlements: entitlements).add(to: router)
                    AdminRoutes(entitlements: entitlements).add(to: router)
                    SpaceRoutes(entitlements: entitlements).add(to: router)
                    let announcer = CatalogAnnouncer(
                        catalog: catalog, acceptsSandbox: settings.acceptsSandbox, postgres: dependencies.postgres, outbox: dependencies.outbox,
                        schema: dependencies.config.database.schema, clock: clock, logger: dependencies.logger)
                    let expiries = ExpiryAnnouncer(entitlements: entitlements, interval: settings.expirySweepInterval, logger: dependencies.logger)
                    return ServiceComponents(
                        handlers: EntitlementsEventHandlers(entitlements: entitlements, spaces: spaces).handlers,
                        services: [announcer, expiries] + (entitlements.changes.map { [$0] } ?? []))
                })
            }
        )
    }
}

/// Builds the entitlements application; `main` and the tests both call this.
func buildApplication(_ config: ServiceConfig) throws -> some ApplicationProtocol {
    try buildServiceApplication(EntitlementsService.definition, config: config)
}
