import Foundation
import Hummingbird
import ServiceKit

/// The social service: profiles, follows, blocks, notifications. Its features arrive in their own issues; today it is the kit's process:
/// config, its own schema and migrations, the event relay and consumer, health and metrics.
enum SocialService {
    static let definition = ServiceDefinition(
        name: "social",
        defaultPort: 8082,
        migrations: { try ServiceDefinition.bundledMigrations(.module) }
    )
}

/// Builds the social application; `main` and the tests both call this.
func buildApplication(_ config: ServiceConfig) throws -> some ApplicationProtocol {
    try buildServiceApplication(SocialService.definition, config: config)
}
