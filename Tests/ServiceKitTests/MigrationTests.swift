import Foundation
import Logging
import PostgresNIO
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import Testing
import TestSupport

@Suite struct MigrationTests {
    let migrations = [
        Migration(
            name: "0001_items",
            sql: """
                CREATE TABLE items (id serial PRIMARY KEY, label text NOT NULL);
                -- a semicolon in a comment; and in a string below
                INSERT INTO items (label) VALUES ('first; still first');
                CREATE FUNCTION touch() RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN 1; END $$;
                """),
        Migration(name: "0002_more", sql: "INSERT INTO items (label) VALUES ('second');"),
    ]

    func count(_ client: PostgresClient, _ sql: String) async throws -> Int {
        for try await value in try await client.query(PostgresQuery(unsafeSQL: sql), logger: TestEnvironment.logger).decode(Int.self) { return value }
        return -1
    }

    @Test func appliesEachFileOnceAndRecordsIt() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        try await withClient(database.config(for: "social")) { (client: PostgresClient) async throws in
            let runner = MigrationRunner(client: client, schema: "social", migrations: migrations, logger: TestEnvironment.logger)
            #expect(try await runner.run() == ["0001_items", "0002_more"])
            #expect(try await runner.run() == [])
            #expect(try await count(client, "SELECT count(*)::int FROM social.items") == 2)
            #expect(try await count(client, "SELECT count(*)::int FROM social.schema_migrations") == 2)
            #expect(try await count(client, "SELECT touch()") == 1)
        }
    }

    @Test func twoRunnersStartedTogetherApplyEachFileOnce() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        let migrations = self.migrations
        let results = try await withThrowingTaskGroup(of: [String].self) { group in
            for _ in 0..<2 {
                group.addTask {
                    try await withClient(database.config(for: "social")) { (client: PostgresClient) async throws in
                        try await MigrationRunner(client: client, schema: "social", migrations: migrations, logger: TestEnvironment.logger).run()
                    }
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results.map(\.count).sorted() == [0, 2])
        try await withClient(database.config(for: "social")) { (client: PostgresClient) async throws in
            #expect(try await count(client, "SELECT count(*)::int FROM social.items") == 2)
        }
    }

    @Test func anEditedAppliedFileStopsWithAClearError() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        try await withClient(database.config(for: "social")) { (client: PostgresClient) async throws in
            try await MigrationRunner(client: client, schema: "social", migrations: migrations, logger: TestEnvironment.logger).run()
            var edited = migrations
            edited[0].sql += "\n-- edited"
            let error = await #expect(throws: MigrationError.self) {
                try await MigrationRunner(client: client, schema: "social", migrations: edited, logger: TestEnvironment.logger).run()
            }
            #expect(String(describing: error!).contains("0001_items was already applied"))
            #expect(String(describing: error!).contains("add a new migration"))
        }
    }

    /// A build older than the schema (a pod of the previous release restarting during a rollout,
    /// or a rollback) starts when every file it has is applied, whatever newer ones were; one with
    /// files of its own still to apply beside a name it lacks (a file renamed or deleted) stops.
    @Test func anOlderBuildServesOnANewerSchemaAndARenamedFileStops() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        try await withClient(database.config(for: "social")) { (client: PostgresClient) async throws in
            // One release applied 0001; the next, 0002 and a kit migration named to sort first.
            try await MigrationRunner(client: client, schema: "social", migrations: [migrations[0]], logger: TestEnvironment.logger).run()
            let newer = [Migration(name: "0000_kit", sql: "CREATE TABLE kit (id int);")] + migrations
            #expect(try await MigrationRunner(client: client, schema: "social", migrations: newer, logger: TestEnvironment.logger).run() == ["0000_kit", "0002_more"])
            #expect(try await MigrationRunner(client: client, schema: "social", migrations: [migrations[0]], logger: TestEnvironment.logger).run() == [])
            #expect(try await MigrationRunner(client: client, schema: "social", migrations: migrations, logger: TestEnvironment.logger).run() == [])
            let renamed = [migrations[0], Migration(name: "0002_renamed", sql: migrations[1].sql)]
            let error = await #expect(throws: MigrationError.self) {
                try await MigrationRunner(client: client, schema: "social", migrations: renamed, logger: TestEnvironment.logger).run()
            }
            #expect(String(describing: error!).contains("0000_kit is recorded in social.schema_migrations but no file has that name"))
            #expect(try await count(client, "SELECT count(*)::int FROM social.items") == 2)
            // A file of the build's own deleted (applied before the build's newest): it stops too.
            let deleted = await #expect(throws: MigrationError.self) {
                try await MigrationRunner(client: client, schema: "social", migrations: [newer[0], migrations[1]], logger: TestEnvironment.logger).run()
            }
            #expect(String(describing: deleted!).contains("0001_items is recorded"))
        }
    }

    @Test func aFailingMigrationLeavesNothingBehind() async throws {
        let database = try await TestDatabase.create(services: ["social"])
        try await withClient(database.config(for: "social")) { (client: PostgresClient) async throws in
            let broken = migrations + [Migration(name: "0003_broken", sql: "CREATE TABLE other (id int); SELECT * FROM nowhere;")]
            await #expect(throws: MigrationError.self) {
                try await MigrationRunner(client: client, schema: "social", migrations: broken, logger: TestEnvironment.logger).run()
            }
            // One transaction: the good files before it were rolled back too, and apply again later.
            #expect(try await MigrationRunner(client: client, schema: "social", migrations: migrations, logger: TestEnvironment.logger).run().count == 2)
        }
    }

    @Test func aServiceRoleCannotReadAnotherSchema() async throws {
        let database = try await TestDatabase.create(services: ["auth", "social"])
        try await withClient(database.config(for: "auth")) { (client: PostgresClient) async throws in
            try await MigrationRunner(client: client, schema: "auth", migrations: EventBusSchema.migrations, logger: TestEnvironment.logger).run()
        }
        try await withClient(database.config(for: "social")) { (client: PostgresClient) async throws in
            let error = await #expect(throws: PSQLError.self) {
                try await client.query("SELECT count(*) FROM auth.outbox", logger: TestEnvironment.logger)
            }
            #expect(error?.serverInfo?[.sqlState] == "42501")  // insufficient_privilege
            await #expect(throws: PSQLError.self) {
                try await client.query("CREATE TABLE public.sneaky (id int)", logger: TestEnvironment.logger)
            }
        }
    }

    @Test func scriptSplittingRespectsQuotesCommentsAndDollarBodies() {
        let statements = SQLScript.statements(
            """
            -- leading comment; with a semicolon
            CREATE TABLE a (t text DEFAULT 'x;y');
            /* block; comment */ SELECT "odd;name" FROM a;
            DO $body$ BEGIN PERFORM 1; END $body$;
            SELECT 'it''s; fine'
            """)
        #expect(statements.count == 4)
        #expect(statements[2].hasPrefix("DO $body$ BEGIN PERFORM 1; END $body$"))
        #expect(statements[3] == "SELECT 'it''s; fine'")
        // Characters outside ASCII, in text, quotes and a dollar tag; a tag that is not closed runs
        // to the end; "/*/" does not close its comment.
        let others = SQLScript.statements(
            """
            SELECT 'café; crème' AS "naïve;x"; DO $tâche$ SELECT 1; $tâche$; SELECT 2 /*/ ; */; SELECT $a$ open; to the end
            """)
        #expect(others == [#"SELECT 'café; crème' AS "naïve;x""#, "DO $tâche$ SELECT 1; $tâche$", "SELECT 2 /*/ ; */", "SELECT $a$ open; to the end"])
    }
}
