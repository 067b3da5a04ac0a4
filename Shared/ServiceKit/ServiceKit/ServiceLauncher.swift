import Foundation
import Hummingbird
import Logging
import PostgresNIO
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens

/// The command line of every service executable:
/// `<service> [serve]` runs it; `<service> migrate` applies migrations and exits;
/// `<service> provision` creates its role and schema with `DATABASE_ADMIN_URL`;
/// `<service> --version` prints the version it was built as (`BuildVersion`).
public enum ServiceLauncher {
    /// On the main actor, as the executables' `main` is: `ProcessTuning.apply()` must run on the main
    /// thread, before any other thread starts (a nonisolated `main` would run on a worker of the
    /// global executor that the tuning replaces).
    @MainActor
    public static func main(_ definition: ServiceDefinition, arguments: [String] = CommandLine.arguments, environment: [String: String] = ProcessInfo.processInfo.environment) async {
        ProcessTuning.apply()
        let command = arguments.dropFirst().first ?? "serve"
        // Before the configuration is read: a version needs no database, nor production's settings.
        if command == "--version" {
            print("\(definition.name) \(BuildVersion.current)")
            return
        }
        do {
            let config = try loadConfig(definition, environment: environment)
            switch command {
            case "serve":
                Logger(label: definition.name).info("starting", metadata: ["global_executor": "\(ProcessTuning.tasksRunOnEventLoops ? "event loops" : "the runtime's pool")"])
                let app = try buildServiceApplication(definition, config: config)
                try await app.runService()
                Logger(label: definition.name).info("stopped cleanly")
            case "migrate":
                try await withClient(config.database) { client, logger in
                    let applied = try await MigrationRunner(client: client, schema: config.database.schema, migrations: try definition.allMigrations(), logger: logger).run()
                    print("\(definition.name): \(applied.count) migration(s) applied")
                }
            case "provision":
                var env = EnvironmentReader(environment)
                let adminURL = env.url("DATABASE_ADMIN_URL", default: nil, schemes: ["postgres", "postgresql"])
                try env.finish()
                let admin = DatabaseConfig(
                    host: adminURL?.hostName ?? "", port: adminURL?.port ?? 5432, user: adminURL?.user ?? "postgres", password: adminURL?.password,
                    database: String(adminURL?.path.dropFirst() ?? ""), schema: "public")
                try await withClient(admin) { client, logger in
                    try await DatabaseProvisioner(admin: client, logger: logger).provision(
                        role: config.database.user, password: config.database.password,
                        schema: config.database.schema, database: config.database.database
                    )
                    print("\(definition.name): role \(config.database.user) owns schema \(config.database.schema) in \(config.database.database)")
                }
            case "-h", "--help", "help":
                let extra = try definition.setup(config).commands.sorted { $0.key < $1.key }.map { "\n  \(definition.name) \($0.value.usage)" }.joined()
                print("usage: \(definition.name) [serve|migrate|provision|--version]\(extra)")
            default:
                guard let custom = try definition.setup(config).commands[command] else {
                    throw ConfigurationError(problems: ["unknown command \"\(command)\"; use serve, migrate, provision or --help"])
                }
                try await withClient(config.database) { client, logger in
                    _ = try await MigrationRunner(client: client, schema: config.database.schema, migrations: try definition.allMigrations(), logger: logger).run()
                    let context = CommandContext(config: config, postgres: client, outbox: EventOutbox(producer: definition.name), logger: logger)
                    try await custom.run(Array(arguments.dropFirst(2)), context)
                }
            }
        } catch {
            FileHandle.standardError.write(Data("\(definition.name): \(error)\n".utf8))
            exit(1)
        }
    }

    package static func loadConfig(_ definition: ServiceDefinition, environment: [String: String]) throws -> ServiceConfig {
        try ServiceConfig.load(name: definition.name, defaultPort: definition.defaultPort, environment: environment)
    }

    static func withClient(_ config: DatabaseConfig, _ body: @escaping @Sendable (PostgresClient, Logger) async throws -> Void) async throws {
        let logger = Logger(label: "cli")
        let client = PostgresClient(database: config, logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            try await body(client, logger)
        }
    }
}
