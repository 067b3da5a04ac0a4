import Foundation
import Hummingbird
import ServiceKit
import ServiceKitDatabase
import ServiceKitEvents

/// The nutrition service: meals, metrics, trends. It runs as the kit's process:
/// config, its own schema and migrations, the event relay and consumer, health and metrics.
enum NutritionService {
    static let definition = ServiceDefinition(
        name: "nutrition",
        defaultPort: 8085,
        migrations: { try ServiceDefinition.bundledMigrations(.module) }
    )
}

/// Builds the nutrition application; `main` and the tests both call this.
func buildApplication(_ config: ServiceConfig) throws -> some ApplicationProtocol {
    try buildServiceApplication(NutritionService.definition, config: config)
}
