import Hummingbird
import Mailer
import ServiceKit

/// The invitations service: a coach's clients and their invitations by mail, accepting one from a
/// link or from the app, the link between client and coach. Accounts come from auth's events; an
/// acceptance is `invitation.accepted`, on which auth grants `client`.
enum InvitationsService {
    static let definition = ServiceDefinition(
        name: "invitations",
        defaultPort: ServiceRegistry.invitations.port,
        migrations: { MailOutbox.migrations + (try ServiceDefinition.bundledMigrations(.module)) },
        openAPIDocument: ServiceDefinition.bundledOpenAPIDocument(.module),
        setup: { config in
            let settings = try InvitationsSettings(config)
            let pages = try PageRenderer(directory: PageRenderer.bundledDirectory(.module), settings: settings.pages, expecting: InvitePageRoutes.templates)
            // An acceptance's path holds the code: never kept with an idempotency key (a second
            // acceptance is `409 invitation_used` anyway).
            return ServiceSetup(
                idempotencyExcluded: ["/v1/invitations/"],
                build: { router, dependencies in
                    let invitations = Invitations(dependencies: dependencies, settings: settings)
                    ClientRoutes(invitations: invitations).add(to: router)
                    InvitationRoutes(invitations: invitations).add(to: router)
                    CoachRoutes(invitations: invitations).add(to: router)
                    InvitePageRoutes(invitations: invitations, pages: pages).add(to: router)
                    return ServiceComponents(
                        handlers: InvitationsEventHandlers(invitations: invitations).handlers,
                        services: [MailSender(client: dependencies.postgres, transport: SMTPTransport(config: settings.smtp), logger: dependencies.logger, lease: settings.smtp.timeout * 4)]
                    )
                })
        }
    )
}

/// Builds the invitations application; `main` and the tests both call this.
func buildApplication(_ config: ServiceConfig) throws -> some ApplicationProtocol {
    try buildServiceApplication(InvitationsService.definition, config: config)
}
