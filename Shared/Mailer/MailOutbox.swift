import Foundation
import Logging
import PostgresNIO
import ServiceKit
import ServiceLifecycle

/// The mail outbox: a request commits the message with its change, `MailSender` delivers it.
/// Services that send mail add `MailOutbox.migrations` to their migrations.
public struct MailOutbox: Sendable {
    public static let migrations = [created, notifyDropped, recipientIndexed, headersAdded]

    /// The `WorkBell` of the mail sender: rung when a transaction that queued mail commits.
    public static let bell = "mail-outbox"

    static let created = Migration(
        name: "0000_mail_outbox",
        sql: """
            CREATE TABLE mail_outbox (
                id uuid PRIMARY KEY,
                template text NOT NULL,
                recipient text NOT NULL,
                subject text NOT NULL,
                body_text text NOT NULL,
                body_html text,
                status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
                attempts int NOT NULL DEFAULT 0,
                last_error text,
                next_attempt_at timestamptz NOT NULL DEFAULT now(),
                created_at timestamptz NOT NULL DEFAULT now(),
                sent_at timestamptz
            );
            CREATE INDEX mail_outbox_due ON mail_outbox (next_attempt_at) WHERE status = 'pending';

            CREATE FUNCTION mail_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_notify(TG_TABLE_SCHEMA || '_mail', '');
                RETURN NULL;
            END $$;

            CREATE TRIGGER mail_outbox_notify AFTER INSERT ON mail_outbox
                FOR EACH STATEMENT EXECUTE FUNCTION mail_outbox_notify();
            """)

    /// The sender is woken in process (`WorkBell`), as the event relay is.
    static let notifyDropped = Migration(
        name: "0000_mail_outbox_notify_dropped",
        sql: """
            DROP TRIGGER mail_outbox_notify ON mail_outbox;
            DROP FUNCTION mail_outbox_notify();
            """)

    /// Every mail to an address is deleted with its account, sent ones included, which no other
    /// index finds.
    static let recipientIndexed = Migration(
        name: "0000_mail_outbox_recipient_index",
        sql: """
            CREATE INDEX mail_outbox_recipient ON mail_outbox (lower(recipient));
            """)

    /// `Reply-To` and one-click unsubscribe. The unsubscribe URL holds a secret, so it is cleared
    /// with the body once the mail is sent or given up.
    static let headersAdded = Migration(
        name: "0000_mail_outbox_headers",
        sql: """
            ALTER TABLE mail_outbox ADD COLUMN reply_to text, ADD COLUMN unsubscribe_url text;
            """)

    public init() {}

    /// Records a message inside the caller's transaction; `template` names the kind of mail.
    @discardableResult
    public func enqueue(_ message: MailMessage, template: String, on connection: PostgresConnection, logger: Logger) async throws -> UUID {
        let id = UUID()
        try await connection.checkedRun(
            """
            INSERT INTO mail_outbox (id, template, recipient, subject, body_text, body_html, reply_to, unsubscribe_url)
            VALUES (\(id), \(template), \(message.to), \(message.subject), \(message.text), \(message.html), \(message.replyTo), \(message.unsubscribeURL))
            """, logger: logger)
        WorkBell.ringAfterCommit(Self.bell)
        return id
    }
}

/// Delivers the mail outbox: due messages one at a time, each inside a transaction that holds its
/// row, so two replicas never send one message twice. A failure is recorded (attempts, last error)
/// and retried with exponential backoff; a permanent refusal, or `maxAttempts` failures, marks the
/// message `failed`. Refused credentials are not the message's failure: it waits, tried again every
/// `credentialsRetry`, without using an attempt, until the operator fixes them.
public final class MailSender: Service, Sendable {
    private let client: PostgresClient
    private let transport: any MailTransport
    private let logger: Logger
    private let pollInterval: Duration
    private let retryBase: Duration
    private let maxAttempts: Int
    private let credentialsRetry: Duration

    public init(
        client: PostgresClient, transport: any MailTransport, logger: Logger,
        pollInterval: Duration = .seconds(5), retryBase: Duration = .seconds(5), maxAttempts: Int = 8,
        credentialsRetry: Duration = .seconds(600)
    ) {
        self.client = client
        self.transport = transport
        self.logger = logger
        self.pollInterval = pollInterval
        self.retryBase = retryBase
        self.maxAttempts = maxAttempts
        self.credentialsRetry = credentialsRetry
    }

    public func run() async throws {
        try await NotifiedWorker(bell: MailOutbox.bell, pollInterval: pollInterval, logger: logger)
            .run { try await self.sendDue() }
    }

    /// Sends every due message; returns how many it attempted.
    func sendDue() async throws -> Int {
        var attempted = 0
        while try await sendOne() { attempted += 1 }
        return attempted
    }

    /// A message's body goes once it is sent or given up on: it may carry a link whose token is
    /// stored elsewhere only as a hash (a reset, a verification), and a copy kept here would make a
    /// leaked table a set of working links. The row stays (recipient, template, status, times).
    private func sendOne() async throws -> Bool {
        let logger = self.logger
        let transport = self.transport
        let retryBase = self.retryBase
        let maxAttempts = self.maxAttempts
        let credentialsRetry = Int(self.credentialsRetry.components.seconds)
        return try await client.transaction(logger: logger) { connection -> Bool in
            let rows = try await connection.checkedQuery(
                """
                SELECT id, recipient, subject, body_text, body_html, reply_to, unsubscribe_url, attempts FROM mail_outbox
                WHERE status = 'pending' AND next_attempt_at <= now()
                ORDER BY next_attempt_at LIMIT 1 FOR UPDATE SKIP LOCKED
                """, logger: logger)
            var found: (UUID, MailMessage, Int)?
            for try await (id, recipient, subject, text, html, replyTo, unsubscribe, attempts) in rows.decode((UUID, String, String, String, String?, String?, String?, Int).self) {
                found = (id, MailMessage(to: recipient, subject: subject, text: text, html: html, replyTo: replyTo, unsubscribeURL: unsubscribe), attempts)
            }
            guard let (id, message, attempts) = found else { return false }
            do {
                try await transport.send(message, messageID: "\(id.uuidString.lowercased())@foodbackend")
                try await connection.checkedRun(
                    """
                    UPDATE mail_outbox SET status = 'sent', attempts = attempts + 1, sent_at = now(), last_error = NULL,
                        body_text = '', body_html = NULL, unsubscribe_url = NULL
                    WHERE id = \(id)
                    """, logger: logger)
                logger.info("mail sent", metadata: ["mail_id": "\(id)"])
            } catch {
                let permanent = (error as? MailError)?.isPermanent ?? false
                let counted = (error as? MailError)?.countsAsAttempt ?? true
                let failed = permanent || (counted && attempts + 1 >= maxAttempts)
                let delaySeconds = counted ? min(Int(retryBase.components.seconds) * (1 << min(attempts, 10)), 3600) : credentialsRetry
                try await connection.checkedRun(
                    """
                    UPDATE mail_outbox SET attempts = attempts + \(counted ? 1 : 0), last_error = \(String(describing: error)),
                        status = \(failed ? "failed" : "pending"),
                        body_text = CASE WHEN \(failed) THEN '' ELSE body_text END, body_html = CASE WHEN \(failed) THEN NULL ELSE body_html END,
                        unsubscribe_url = CASE WHEN \(failed) THEN NULL ELSE unsubscribe_url END,
                        next_attempt_at = now() + make_interval(secs => \(delaySeconds))
                    WHERE id = \(id)
                    """, logger: logger)
                logger.warning("mail not sent", metadata: ["mail_id": "\(id)", "error": "\(error)", "gave_up": "\(failed)"])
            }
            return true
        }
    }
}
