import Foundation
import Hummingbird
import ServiceKit
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP

/// The invitations service: coach-to-client invitations. It runs as the kit's process:
/// config, its own schema and migrations, the event relay and consumer, health and metrics.
enum InvitationsService {
    static let definition = ServiceDefinition(
        name: "invitations",
        defaultPort: 8083,
        migrations: { try ServiceDefinition.bundledMigrations(.module) }
    )
}

/// Builds the invitations application; `main` and the tests both call this.
func buildApplication(_ config: ServiceConfig) throws -> some ApplicationProtocol {
    try buildServiceApplication(InvitationsService.definition, config: config)
}
