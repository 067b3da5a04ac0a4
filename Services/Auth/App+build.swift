import Hummingbird
import Mailer
import ServiceKit

/// The auth service: accounts (email and password, Apple, Google), sessions with rotating refresh
/// tokens, roles, mail, account deletion. It signs the access tokens every other service checks.
enum AuthService {
    static let definition = ServiceDefinition(
        name: "auth",
        defaultPort: ServiceRegistry.auth.port,
        migrations: { MailOutbox.migrations + (try ServiceDefinition.bundledMigrations(.module)) },
        openAPIDocument: ServiceDefinition.bundledOpenAPIDocument(.module),
        setup: { config in
            let settings = try AuthSettings(config)
            let common = try CommonPasswordList()
            let pages = try PageRenderer(directory: PageRenderer.bundledDirectory(.module), settings: settings.pages, expecting: PageRoutes.templates)
            return ServiceSetup(
                // auth checks its own tokens with its own keys: no HTTP round trip to itself.
                tokenSource: SigningKeys.Source(keys: settings.signing),
                commands: ["create-admin": CreateAdmin.command(settings: settings, common: common)],
                // Sign-ins, refreshes and password changes answer with tokens and carry passwords:
                // never kept for a replay, nor are the pages' forms. auth's other POSTs change state
                // idempotently by themselves.
                idempotencyExcluded: ["/v1/auth/", "/verify-email", "/reset-password"],
                build: { router, dependencies in
                    let accounts = try Accounts(settings: settings, common: common, dependencies: dependencies)
                    SessionRoutes(accounts: accounts).add(to: router)
                    AccountRoutes(accounts: accounts).add(to: router)
                    ProviderRoutes(accounts: accounts).add(to: router)
                    AdminRoutes(accounts: accounts).add(to: router)
                    PageRoutes(accounts: accounts, pages: pages).add(to: router)
                    return ServiceComponents(
                        handlers: AuthEventHandlers(accounts: accounts).handlers,
                        services: [
                            MailSender(client: dependencies.postgres, transport: SMTPTransport(config: settings.smtp), logger: dependencies.logger, lease: settings.smtp.timeout * 4),
                            AuthJanitor(postgres: dependencies.postgres, logger: dependencies.logger),
                        ]
                    )
                }
            )
        }
    )
}

/// Builds the auth application; `main` and the tests both call this.
func buildApplication(_ config: ServiceConfig) throws -> some ApplicationProtocol {
    try buildServiceApplication(AuthService.definition, config: config)
}
