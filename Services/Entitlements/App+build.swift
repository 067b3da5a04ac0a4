import Foundation
import Hummingbird
import ServiceKit
import ServiceKitDatabase
import ServiceKitEvents

/// The entitlements service: tiers, purchases, feature gates. It runs as the kit's process:
/// config, its own schema and migrations, the event relay and consumer, health and metrics.
enum EntitlementsService {
    static let definition = ServiceDefinition(
        name: "entitlements",
        defaultPort: 8084,
        migrations: { try ServiceDefinition.bundledMigrations(.module) }
    )
}

/// Builds the entitlements application; `main` and the tests both call this.
func buildApplication(_ config: ServiceConfig) throws -> some ApplicationProtocol {
    try buildServiceApplication(EntitlementsService.definition, config: config)
}
