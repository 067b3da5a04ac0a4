import Logging
import PostgresNIO
import ServiceKitCore

/// Creates a service's login role and its schema, owned by that role, with no rights anywhere else.
/// Run once per database with an administrator connection (`<service> provision`, `scripts/stack`).
package struct DatabaseProvisioner: Sendable {
    package let admin: PostgresClient
    package let logger: Logger

    package init(admin: PostgresClient, logger: Logger) {
        self.admin = admin
        self.logger = logger
    }

    /// Idempotent: an existing role gets its password reset, an existing schema is left as it is.
    /// Without a password (the role signs in otherwise: a certificate, a password set by hand) the
    /// role's password is left as it is, and a new role has none.
    package func provision(role: String, password: String?, schema: String, database: String) async throws {
        let logger = self.logger
        try await admin.withConnectionOnItsLoop { connection in
            // Roles are cluster-wide; two provisioners racing in one database must not both try to create
            // one (an advisory lock is per database: provisioners of different databases take turns
            // themselves).
            let script = """
                BEGIN;
                SELECT pg_advisory_xact_lock(hashtext('provision-roles'));
                DO $$ BEGIN
                  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = \(quoteLiteral(role))) THEN
                    CREATE ROLE \(quoteIdentifier(role)) LOGIN;
                  END IF;
                END $$;
                ALTER ROLE \(quoteIdentifier(role)) WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE\(password.map { " PASSWORD " + quoteLiteral($0) } ?? "");
                REVOKE ALL ON DATABASE \(quoteIdentifier(database)) FROM PUBLIC;
                GRANT CONNECT, TEMPORARY ON DATABASE \(quoteIdentifier(database)) TO \(quoteIdentifier(role));
                REVOKE ALL ON SCHEMA public FROM PUBLIC;
                CREATE SCHEMA IF NOT EXISTS \(quoteIdentifier(schema)) AUTHORIZATION \(quoteIdentifier(role));
                ALTER SCHEMA \(quoteIdentifier(schema)) OWNER TO \(quoteIdentifier(role));
                REVOKE ALL ON SCHEMA \(quoteIdentifier(schema)) FROM PUBLIC;
                COMMIT;
                """
            for statement in SQLScript.statements(script) {
                try await connection.checkedRun(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
            logger.info("provisioned role and schema", metadata: ["role": "\(role)", "schema": "\(schema)", "database": "\(database)"])
        }
    }
}
