import Foundation
import Hummingbird
import ServiceKit

/// The auth service: accounts, sign-in, sessions, roles. Its features arrive in their own issues; today it is the kit's process:
/// config, its own schema and migrations, the event relay and consumer, health and metrics.
enum AuthService {
    static let definition = ServiceDefinition(
        name: "auth",
        defaultPort: 8081,
        migrations: { try ServiceDefinition.bundledMigrations(.module) }
    )
}

/// Builds the auth application; `main` and the tests both call this.
func buildApplication(_ config: ServiceConfig) throws -> some ApplicationProtocol {
    try buildServiceApplication(AuthService.definition, config: config)
}
