import Foundation
import Logging
import PostgresNIO
import ServiceKit
import ServiceLifecycle

/// The mail outbox: a request commits the message with its change, `MailSender` delivers it.
/// Services that send mail add `MailOutbox.migrations` to their migrations.
public struct MailOutbox: Sendable {
    public static let migrations = [created, notifyDropped, recipientIndexed, headersAdded, claimAdded]

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

    /// Until when a sender holds a message it claimed (set with the claim, cleared with the outcome),
    /// and when a message was withdrawn while held. What drops a message not sent yet (its link
    /// died) deletes it, but a held one may be going out: that one is withdrawn instead, and its
    /// attempt's outcome stands (`sent`, or `failed` with no retry).
    static let claimAdded = Migration(
        name: "0000_mail_outbox_claimed_until",
        sql: """
            ALTER TABLE mail_outbox ADD COLUMN claimed_until timestamptz, ADD COLUMN withdrawn_at timestamptz;
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

/// Delivers the mail outbox: due messages one at a time. A message is claimed first, in a statement
/// of its own that moves its `next_attempt_at` a lease ahead (and says so in `claimed_until`), so
/// that two replicas never send it twice; it is sent with no transaction open, and its outcome is recorded afterwards on whatever
/// connection the pool has, retried for most of the lease. Holding a row lock across the send
/// would lose the outcome with the connection: a connection cut after the SMTP server took the
/// message rolled the transaction back, and the message went out again.
///
/// A sender stopped while it sends gives the message back at once (it may have gone out: at least
/// once, never lost). What remains is a process dying between the send and the record, or a
/// database out of reach for most of the lease: that message is sent again when the lease ends,
/// with the same `Message-ID`. A failure is recorded (attempts, last error) and retried with
/// exponential backoff; a permanent refusal, or `maxAttempts` failures, marks the message `failed`.
/// Refused credentials are not the message's failure: it waits, tried again every
/// `credentialsRetry`, without using an attempt, until the operator fixes them.
public final class MailSender: Service, Sendable {
    private let client: PostgresClient
    private let transport: any MailTransport
    private let logger: Logger
    private let pollInterval: Duration
    private let retryBase: Duration
    private let maxAttempts: Int
    private let credentialsRetry: Duration
    private let lease: Duration

    /// `lease` must outlast one delivery attempt (the transport's timeout) with room to record it.
    public init(
        client: PostgresClient, transport: any MailTransport, logger: Logger,
        pollInterval: Duration = .seconds(5), retryBase: Duration = .seconds(5), maxAttempts: Int = 8,
        credentialsRetry: Duration = .seconds(600), lease: Duration = .seconds(120)
    ) {
        self.client = client
        self.transport = transport
        self.logger = logger
        self.pollInterval = pollInterval
        self.retryBase = retryBase
        self.maxAttempts = maxAttempts
        self.credentialsRetry = credentialsRetry
        self.lease = lease
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

    private typealias Claimed = (id: UUID, message: MailMessage, attempts: Int, withdrawn: Bool)

    /// A message's body goes once it is sent or given up on: it may carry a link whose token is
    /// stored elsewhere only as a hash (a reset, a verification), and a copy kept here would make a
    /// leaked table a set of working links. The row stays (recipient, template, status, times).
    private func sendOne() async throws -> Bool {
        let logger = self.logger
        let claimedAt = ContinuousClock.now
        guard let claimed = try await claim() else { return false }
        let id = claimed.id
        if claimed.withdrawn {
            // Withdrawn while a sender that then stopped held it: not tried again.
            await record(
                id, claimedAt: claimedAt,
                """
                UPDATE mail_outbox SET status = 'failed', last_error = 'withdrawn', body_text = '', body_html = NULL,
                    unsubscribe_url = NULL, claimed_until = NULL
                WHERE id = \(id) AND status = 'pending'
                """)
            return true
        }
        do {
            try await transport.send(claimed.message, messageID: "\(id.uuidString.lowercased())@foodbackend")
        } catch {
            if Task.isCancelled {
                await giveBack(id)
                throw CancellationError()
            }
            let permanent = (error as? MailError)?.isPermanent ?? false
            let counted = (error as? MailError)?.countsAsAttempt ?? true
            let failed = permanent || (counted && claimed.attempts + 1 >= maxAttempts)
            let delaySeconds =
                counted ? min(Int(retryBase.components.seconds) * (1 << min(claimed.attempts, 10)), 3600) : Int(credentialsRetry.components.seconds)
            await record(
                id, claimedAt: claimedAt,
                """
                UPDATE mail_outbox SET attempts = attempts + \(counted ? 1 : 0), last_error = \(String(describing: error)),
                    status = CASE WHEN \(failed) OR withdrawn_at IS NOT NULL THEN 'failed' ELSE 'pending' END,
                    body_text = CASE WHEN \(failed) OR withdrawn_at IS NOT NULL THEN '' ELSE body_text END,
                    body_html = CASE WHEN \(failed) OR withdrawn_at IS NOT NULL THEN NULL ELSE body_html END,
                    unsubscribe_url = CASE WHEN \(failed) OR withdrawn_at IS NOT NULL THEN NULL ELSE unsubscribe_url END,
                    next_attempt_at = now() + make_interval(secs => \(delaySeconds)), claimed_until = NULL
                WHERE id = \(id) AND status = 'pending'
                """)
            logger.warning("mail not sent", metadata: ["mail_id": "\(id)", "error": "\(error)", "gave_up": "\(failed)"])
            return true
        }
        await record(
            id, claimedAt: claimedAt,
            """
            UPDATE mail_outbox SET status = 'sent', attempts = attempts + 1, sent_at = now(), last_error = NULL,
                body_text = '', body_html = NULL, unsubscribe_url = NULL, claimed_until = NULL
            WHERE id = \(id) AND status = 'pending'
            """)
        logger.info("mail sent", metadata: ["mail_id": "\(id)"])
        return true
    }

    /// The oldest due message, its `next_attempt_at` moved a lease ahead in the same statement.
    private func claim() async throws -> Claimed? {
        let logger = self.logger
        let leaseSeconds = Int(lease.components.seconds)
        return try await client.withConnectionOnItsLoop { connection -> Claimed? in
            let rows = try await connection.checkedQuery(
                """
                UPDATE mail_outbox SET next_attempt_at = now() + make_interval(secs => \(leaseSeconds)),
                    claimed_until = now() + make_interval(secs => \(leaseSeconds))
                WHERE id = (
                    SELECT id FROM mail_outbox WHERE status = 'pending' AND next_attempt_at <= now()
                    ORDER BY next_attempt_at LIMIT 1 FOR UPDATE SKIP LOCKED)
                RETURNING id, recipient, subject, body_text, body_html, reply_to, unsubscribe_url, attempts, withdrawn_at IS NOT NULL
                """, logger: logger)
            var claimed: Claimed?
            for try await (id, recipient, subject, text, html, replyTo, unsubscribe, attempts, withdrawn) in rows.decode(
                (UUID, String, String, String, String?, String?, String?, Int, Bool).self)
            {
                let message = MailMessage(to: recipient, subject: subject, text: text, html: html, replyTo: replyTo, unsubscribeURL: unsubscribe)
                claimed = (id, message, attempts, withdrawn)
            }
            return claimed
        }
    }

    /// Records a message's outcome, retried on a new connection for three quarters of the lease: the
    /// message is already with the server (or refused), and losing this write would send it again.
    /// A sender being stopped makes one last bounded try instead of waiting out the retries.
    private func record(_ id: UUID, claimedAt: ContinuousClock.Instant, _ update: PostgresQuery) async {
        let deadline = claimedAt + lease * 3 / 4
        var wait = Duration.milliseconds(100)
        while !Task.isCancelled {
            do {
                try await write(update)
                return
            } catch {
                guard ContinuousClock.now + wait < deadline else {
                    logger.error(
                        "mail outcome not recorded: the message goes again when its lease ends",
                        metadata: ["mail_id": "\(id)", "error": "\(String(reflecting: error))"])
                    return
                }
                logger.warning("mail outcome not recorded; retrying", metadata: ["mail_id": "\(id)", "error": "\(error)"])
                try? await Task.sleep(for: wait)
                wait = min(wait * 2, .seconds(5))
            }
        }
        await lastWrite(update, id: id, what: "mail outcome")
    }

    /// A message claimed by a sender being stopped mid-send is due again at once, for this or
    /// another replica, rather than at the end of its lease.
    private func giveBack(_ id: UUID) async {
        await lastWrite("UPDATE mail_outbox SET next_attempt_at = now(), claimed_until = NULL WHERE id = \(id) AND status = 'pending'", id: id, what: "mail given back")
    }

    /// A write made while the sender is being stopped: in a task of its own, which the stop does not
    /// cancel, and given two seconds at most, so a database out of reach cannot hold the shutdown.
    private func lastWrite(_ update: PostgresQuery, id: UUID, what: String) async {
        let write = Task { try await withTimeout(.seconds(2), what: what) { try await self.write(update) } }
        if case .failure(let error) = await write.result {
            logger.warning("\(what) not written while stopping", metadata: ["mail_id": "\(id)", "error": "\(error)"])
        }
    }

    private func write(_ update: PostgresQuery) async throws {
        let logger = self.logger
        try await client.withConnectionOnItsLoop { connection in try await connection.checkedRun(update, logger: logger) }
    }
}
