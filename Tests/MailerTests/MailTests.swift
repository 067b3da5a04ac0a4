import Foundation
import Logging
@testable import Mailer
import PostgresNIO
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
import Synchronization
import Testing
import TestSupport

/// Mail through a real SMTP server: the local sink (aiosmtpd) the stack runs, which saves each
/// message as an .eml file.
@Suite struct MailTests {
    func config(_ sink: MailSink) -> SMTPConfig {
        SMTPConfig(url: "smtp://127.0.0.1:\(sink.port)", from: "Food Backend <no-reply@foodbackend.test>", timeout: .seconds(5))
    }

    /// Replies go to the address named, and mail clients get RFC 8058's one-click unsubscribe; neither
    /// header can carry another header in.
    @Test func replyToAndOneClickUnsubscribeAreHeaders() async throws {
        let sink = try await MailSink.start()
        defer { sink.stop() }
        let message = MailMessage(
            to: "ana@example.com", subject: "Invited", text: "t", replyTo: "coach@example.com\r\nBcc: evil@example.com",
            unsubscribeURL: "https://api.test/v1/unsubscribe?token=abc")
        try await SMTPTransport(config: config(sink)).send(message, messageID: "h1@foodbackend")
        let mail = try #require(try await sink.waitForMessages(1).first)
        #expect(mail.contains("Reply-To: coach@example.com  Bcc: evil@example.com"))
        #expect(!mail.contains("\r\nBcc: evil") && !mail.contains("\nBcc: evil"))
        #expect(mail.contains("List-Unsubscribe: <https://api.test/v1/unsubscribe?token=abc>"))
        #expect(mail.contains("List-Unsubscribe-Post: List-Unsubscribe=One-Click"))
    }

    @Test func aMessageArrivesWithBothPartsAndSafeHeaders() async throws {
        let sink = try await MailSink.start()
        defer { sink.stop() }
        let transport = SMTPTransport(config: config(sink))
        let message = MailMessage(
            to: "ana@example.com", subject: "Bienvenue, Ana ✓\r\nBcc: evil@example.com",
            text: "Open https://app.test/verify?token=abc", html: "<p><a href=\"https://app.test/verify?token=abc\">Verify</a></p>")
        try await transport.send(message, messageID: "m1@foodbackend")
        let received = try await sink.waitForMessages(1)
        let mail = try #require(received.first)
        #expect(mail.contains("X-Envelope-To: ana@example.com"))
        #expect(mail.contains("X-Envelope-From: no-reply@foodbackend.test"))
        #expect(mail.contains("Subject: =?UTF-8?B?"))
        #expect(!mail.contains("\r\nBcc: evil"))
        #expect(mail.contains("multipart/alternative"))
        #expect(mail.contains("Content-Transfer-Encoding: base64"))
        // The sink hands tests the decoded parts, as a mail client shows them.
        #expect(mail.contains("Open https://app.test/verify?token=abc"))
        #expect(mail.contains("<a href=\"https://app.test/verify?token=abc\">Verify</a>"))
    }

    /// As a real provider runs it: STARTTLS required before anything else, AUTH required over TLS.
    /// The transport upgrades, signs in and delivers; refused credentials leave the message for a
    /// later try; it checks the server's certificate (a server whose certificate it cannot trust gets
    /// nothing); and with `SMTP_STARTTLS=required` it never sends to a server that offers no TLS.
    @Test func startTLSAndAuthAreUsedAndTheCertificateIsChecked() async throws {
        let (certificate, key) = try await Self.selfSignedCertificate()
        defer { try? FileManager.default.removeItem(at: URL(fileURLWithPath: certificate).deletingLastPathComponent()) }
        let sink = try await MailSink.start(tls: (certificate, key), login: ("mailer", "s3cret-relay"))
        defer { sink.stop() }
        func transport(password: String = "s3cret-relay", trusting caFile: String? = certificate) -> SMTPTransport {
            SMTPTransport(
                config: SMTPConfig(
                    url: "smtp://127.0.0.1:\(sink.port)", username: "mailer", password: password,
                    from: "no-reply@foodbackend.test", requireTLS: true, timeout: .seconds(30), caFile: caFile))
        }

        try await transport().send(MailMessage(to: "ana@example.com", subject: "Over TLS", text: "t"), messageID: "tls1@foodbackend")
        #expect(try await sink.waitForMessages(1).first?.contains("Subject: Over TLS") == true)

        // Refused credentials are the server's configuration: the message is kept for another try.
        let refusedLogin = await #expect(throws: MailError.self) {
            try await transport(password: "wrong").send(MailMessage(to: "ana@example.com", subject: "Bad login", text: "t"), messageID: "tls2@foodbackend")
        }
        guard case .credentialsRefused(let why)? = refusedLogin else { Issue.record("\(String(describing: refusedLogin))"); return }
        #expect(why.contains("535") && refusedLogin?.isPermanent == false)
        let untrusted = await #expect(throws: MailError.self) {
            try await transport(trusting: nil).send(MailMessage(to: "ana@example.com", subject: "Untrusted", text: "t"), messageID: "tls3@foodbackend")
        }
        #expect(untrusted?.isPermanent == false, "\(String(describing: untrusted))")

        let plain = try await MailSink.start()
        defer { plain.stop() }
        let clear = SMTPTransport(config: SMTPConfig(url: "smtp://127.0.0.1:\(plain.port)", from: "no-reply@foodbackend.test", requireTLS: true, timeout: .seconds(5)))
        await #expect(throws: MailError.self) {
            try await clear.send(MailMessage(to: "ana@example.com", subject: "In clear", text: "t"), messageID: "tls4@foodbackend")
        }
        try await Task.sleep(for: .milliseconds(300))
        #expect(sink.messages().count == 1 && plain.messages().isEmpty, "only the first message was delivered")
    }

    /// A certificate for 127.0.0.1 and its key, made with `openssl` in a folder of the test's own
    /// (the caller removes it).
    static func selfSignedCertificate() async throws -> (certificate: String, key: String) {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(TestEnvironment.uniqueName("smtp-tls"))
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let certificate = folder.appendingPathComponent("cert.pem").path, key = folder.appendingPathComponent("key.pem").path
        let openssl = try ChildProcess([
            "/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", key, "-out", certificate, "-subj", "/CN=127.0.0.1", "-days", "1", "-addext", "subjectAltName=IP:127.0.0.1",
        ])
        try #require(try await openssl.wait() == 0)
        return (certificate, key)
    }

    /// Refused credentials are the operator's to fix, not the message's failure: the message waits
    /// without using its attempts (here one would be its last) and goes once the password is right.
    @Test func mailWaitsWhileTheServerRefusesOurCredentials() async throws {
        let (certificate, key) = try await Self.selfSignedCertificate()
        defer { try? FileManager.default.removeItem(at: URL(fileURLWithPath: certificate).deletingLastPathComponent()) }
        let sink = try await MailSink.start(tls: (certificate, key), login: ("mailer", "right"))
        defer { sink.stop() }
        let database = try await TestDatabase.create(services: ["auth"])
        try await withClient(database.config(for: "auth")) { (client: PostgresClient) async throws in
            try await MigrationRunner(client: client, schema: "auth", migrations: MailOutbox.migrations, logger: TestEnvironment.logger).run()
            @Sendable func sender(password: String) -> MailSender {
                MailSender(
                    client: client,
                    transport: SMTPTransport(
                        config: SMTPConfig(
                            url: "smtp://127.0.0.1:\(sink.port)", username: "mailer", password: password,
                            from: "no-reply@foodbackend.test", requireTLS: true, timeout: .seconds(5), caFile: certificate)),
                    logger: TestEnvironment.logger, pollInterval: .milliseconds(100), retryBase: .zero, maxAttempts: 1, credentialsRetry: .seconds(1))
            }
            @Sendable func state(_ id: UUID) async throws -> (status: String, attempts: Int, error: String?) {
                let rows = try await client.query("SELECT status, attempts, last_error FROM mail_outbox WHERE id = \(id)", logger: TestEnvironment.logger)
                for try await row in rows.decode((String, Int, String?).self) { return row }
                return ("missing", 0, nil)
            }
            let id = try await client.transaction(logger: TestEnvironment.logger) { connection in
                try await MailOutbox().enqueue(MailMessage(to: "ana@example.com", subject: "Waits", text: "t"), template: "test", on: connection, logger: TestEnvironment.logger)
            }
            let refused = Task { try await sender(password: "wrong").run() }
            // Generous waits: with the whole suite running on two cores, a TLS handshake with the
            // sink has taken seconds.
            try await waitUntil(.seconds(30)) { try await state(id).error?.contains("credentials refused") == true }
            try await Task.sleep(for: .milliseconds(2_500))  // two more tries, a second apart
            let waiting = try await state(id)
            #expect(waiting.status == "pending" && waiting.attempts == 0, "\(waiting)")
            refused.cancel()
            _ = await refused.result

            let fixed = Task { try await sender(password: "right").run() }
            defer { fixed.cancel() }
            try await waitUntil(.seconds(30)) { try await state(id).status == "sent" }
            #expect(try await sink.waitForMessages(1, within: .seconds(30)).first?.contains("Subject: Waits") == true)
            // Sent, the body is not kept (it may carry a link): the row says to whom and when.
            let kept = try await client.query("SELECT body_text, body_html, recipient FROM mail_outbox WHERE id = \(id)", logger: TestEnvironment.logger)
            for try await (text, html, recipient) in kept.decode((String, String?, String).self) {
                #expect(text == "" && html == nil && recipient == "ana@example.com")
            }
        }
    }

    /// Production requires TLS unless told otherwise; a CA file that cannot be read stops the start.
    @Test func productionRequiresTLSAndTheCAFileMustBeReadable() throws {
        var production = EnvironmentReader(["APP_ENV": "production"])
        #expect(SMTPConfig(reading: &production).requireTLS)
        var localSink = EnvironmentReader(["APP_ENV": "production", "SMTP_STARTTLS": "optional"])
        #expect(!SMTPConfig(reading: &localSink).requireTLS)
        var development = EnvironmentReader([:])
        #expect(!SMTPConfig(reading: &development).requireTLS)
        var missing = EnvironmentReader(["SMTP_CA_FILE": "/nonexistent/ca.pem"])
        _ = SMTPConfig(reading: &missing)
        let error = #expect(throws: ConfigurationError.self) { try missing.finish() }
        #expect(String(describing: error).contains("SMTP_CA_FILE"))
    }

    @Test func anUnreachableServerIsATransientError() async throws {
        let port = try RedisServer.freePort()
        let transport = SMTPTransport(config: SMTPConfig(url: "smtp://127.0.0.1:\(port)", from: "a@b.test", timeout: .seconds(2)))
        let error = await #expect(throws: MailError.self) {
            try await transport.send(MailMessage(to: "x@example.com", subject: "s", text: "t"), messageID: "m2@foodbackend")
        }
        #expect(error?.isPermanent == false)
    }

    @Test func theOutboxIsDeliveredAfterCommitAndRetriedUntilTheServerIsBack() async throws {
        let database = try await TestDatabase.create(services: ["auth"])
        let port = try RedisServer.freePort()
        try await withClient(database.config(for: "auth")) { (client: PostgresClient) async throws in
            try await MigrationRunner(client: client, schema: "auth", migrations: MailOutbox.migrations, logger: TestEnvironment.logger).run()
            let transport = SMTPTransport(config: SMTPConfig(url: "smtp://127.0.0.1:\(port)", from: "no-reply@foodbackend.test", timeout: .seconds(2)))
            let sender = MailSender(
                client: client, transport: transport, logger: TestEnvironment.logger,
                pollInterval: .milliseconds(200), retryBase: .zero, maxAttempts: 10_000)
            let running = Task { try await sender.run() }
            defer { running.cancel() }
            // A rolled-back request leaves no mail behind.
            struct Abort: Error {}
            _ = try? await client.transaction(logger: TestEnvironment.logger) { connection in
                try await MailOutbox().enqueue(MailMessage(to: "never@example.com", subject: "no", text: "no"), template: "test", on: connection, logger: TestEnvironment.logger)
                throw Abort()
            }
            let id = try await client.transaction(logger: TestEnvironment.logger) { connection in
                try await MailOutbox().enqueue(MailMessage(to: "bo@example.com", subject: "Reset", text: "token xyz"), template: "password_reset", on: connection, logger: TestEnvironment.logger)
            }
            // No server yet: attempts pile up with the error recorded.
            try await waitUntil {
                let rows = try await client.query("SELECT attempts, last_error FROM mail_outbox WHERE id = \(id)", logger: TestEnvironment.logger)
                for try await (attempts, error) in rows.decode((Int, String?).self) { return attempts >= 2 && error != nil }
                return false
            }
            let sink = try await MailSink.start(port: port)
            defer { sink.stop() }
            let received = try await sink.waitForMessages(1)
            #expect(received.count == 1 && received[0].contains("X-Envelope-To: bo@example.com"))
            try await waitUntil {
                let rows = try await client.query("SELECT status FROM mail_outbox WHERE id = \(id)", logger: TestEnvironment.logger)
                for try await status in rows.decode(String.self) { return status == "sent" }
                return false
            }
            let count = try await client.query("SELECT count(*)::int FROM mail_outbox", logger: TestEnvironment.logger).decode(Int.self).first { _ in true }
            #expect(count == 1)
        }
    }

    /// A message the server refuses for good (550) is marked `failed` at once with the server's
    /// answer; one that cannot be delivered after `maxAttempts` tries is marked `failed` too. Neither
    /// is retried again, and neither holds up the mail behind it.
    @Test func refusedAndUndeliverableMailEndsFailedWithItsReason() async throws {
        let database = try await TestDatabase.create(services: ["auth"])
        let sink = try await MailSink.start(rejecting: "nobody")
        defer { sink.stop() }
        try await withClient(database.config(for: "auth")) { (client: PostgresClient) async throws in
            try await MigrationRunner(client: client, schema: "auth", migrations: MailOutbox.migrations, logger: TestEnvironment.logger).run()
            func enqueue(_ to: String) async throws -> UUID {
                try await client.transaction(logger: TestEnvironment.logger) { connection in
                    try await MailOutbox().enqueue(MailMessage(to: to, subject: "Hi", text: "t"), template: "test", on: connection, logger: TestEnvironment.logger)
                }
            }
            @Sendable func state(_ id: UUID) async throws -> (status: String, attempts: Int, error: String?) {
                let rows = try await client.query("SELECT status, attempts, last_error FROM mail_outbox WHERE id = \(id)", logger: TestEnvironment.logger)
                for try await row in rows.decode((String, Int, String?).self) { return row }
                return ("missing", 0, nil)
            }
            let refused = try await enqueue("nobody@example.com")
            let fine = try await enqueue("cook@example.com")
            let sender = MailSender(
                client: client, transport: SMTPTransport(config: config(sink)), logger: TestEnvironment.logger,
                pollInterval: .milliseconds(100), retryBase: .zero, maxAttempts: 3)
            let running = Task { try await sender.run() }
            try await waitUntil {
                let (refusedNow, fineNow) = (try await state(refused), try await state(fine))
                return refusedNow.status == "failed" && fineNow.status == "sent"
            }
            let refusal = try await state(refused)
            #expect(refusal.attempts == 1, "a 550 is not retried")
            #expect(refusal.error?.contains("550") == true, "\(refusal)")
            #expect(try await sink.waitForMessages(1).count == 1)
            // Given up on or sent, neither body is kept.
            let bodies = try await client.query(
                "SELECT count(*)::int FROM mail_outbox WHERE id IN (\(refused), \(fine)) AND body_text = '' AND body_html IS NULL",
                logger: TestEnvironment.logger
            ).decode(Int.self).first { _ in true }
            #expect(bodies == 2)
            running.cancel()

            // Nothing listens: three tries, then failed, with the transport's error kept.
            let port = try RedisServer.freePort()
            let unreachable = try await enqueue("later@example.com")
            let lost = MailSender(
                client: client, transport: SMTPTransport(config: SMTPConfig(url: "smtp://127.0.0.1:\(port)", from: "a@b.test", timeout: .seconds(2))),
                logger: TestEnvironment.logger, pollInterval: .milliseconds(100), retryBase: .zero, maxAttempts: 3)
            let trying = Task { try await lost.run() }
            defer { trying.cancel() }
            try await waitUntil { try await state(unreachable).status == "failed" }
            let gaveUp = try await state(unreachable)
            #expect(gaveUp.attempts == 3 && gaveUp.error != nil, "\(gaveUp)")
            try await Task.sleep(for: .milliseconds(500))
            #expect(try await state(unreachable).attempts == 3, "a failed message is not tried again")
        }
    }

    /// The database connections cut while the SMTP server takes a message (a failover, an
    /// operator's `pg_terminate_backend`): the message was delivered, so it is recorded sent, once,
    /// and not sent again.
    @Test func aConnectionCutDuringTheSendDoesNotSendTheMessageAgain() async throws {
        let database = try await TestDatabase.create(services: ["auth"])
        let sink = try await MailSink.start()
        defer { sink.stop() }
        try await withClient(database.config(for: "auth")) { (client: PostgresClient) async throws in
            try await MigrationRunner(client: client, schema: "auth", migrations: MailOutbox.migrations, logger: TestEnvironment.logger).run()
            /// Delivers, then (the first time) ends every other connection to this test's database,
            /// which is the sender's pool's and no other test's.
            final class CuttingTransport: MailTransport {
                let inner: SMTPTransport
                let client: PostgresClient
                let cuts = Mutex(0)
                init(inner: SMTPTransport, client: PostgresClient) {
                    self.inner = inner
                    self.client = client
                }
                func send(_ message: MailMessage, messageID: String) async throws {
                    try await inner.send(message, messageID: messageID)
                    guard
                        cuts.withLock({ count in
                            defer { count += 1 }
                            return count == 0
                        })
                    else { return }
                    try await client.checkedQuery(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
                        logger: TestEnvironment.logger)
                }
            }
            let id = try await client.transaction(logger: TestEnvironment.logger) { connection in
                try await MailOutbox().enqueue(MailMessage(to: "once@example.com", subject: "Once", text: "t"), template: "test", on: connection, logger: TestEnvironment.logger)
            }
            let sender = MailSender(
                client: client, transport: CuttingTransport(inner: SMTPTransport(config: config(sink)), client: client), logger: TestEnvironment.logger,
                pollInterval: .milliseconds(100), retryBase: .zero)
            let running = Task { try await sender.run() }
            defer { running.cancel() }
            try await waitUntil(.seconds(30)) { try await Self.status(of: id, client) == "sent" }
            // Long enough for a second send, had the outcome been lost with the connection.
            try await Task.sleep(for: .seconds(2))
            #expect(sink.messages().count == 1, "sent \(sink.messages().count) times")
        }
    }

    /// A sender stopped while the SMTP server holds the message (a deploy, a scale-down) gives the
    /// message back at once: another sender sends it without waiting for the claim's lease to end.
    @Test func aSenderStoppedMidSendGivesTheMessageBack() async throws {
        let database = try await TestDatabase.create(services: ["auth"])
        let sink = try await MailSink.start()
        defer { sink.stop() }
        try await withClient(database.config(for: "auth")) { (client: PostgresClient) async throws in
            try await MigrationRunner(client: client, schema: "auth", migrations: MailOutbox.migrations, logger: TestEnvironment.logger).run()
            let id = try await client.transaction(logger: TestEnvironment.logger) { connection in
                try await MailOutbox().enqueue(MailMessage(to: "back@example.com", subject: "Back", text: "t"), template: "test", on: connection, logger: TestEnvironment.logger)
            }
            let stopped = await Self.senderStalledMidSend(client)
            stopped.cancel()
            _ = await stopped.result
            let rows = try await client.query(
                "SELECT status, attempts, next_attempt_at <= now() FROM mail_outbox WHERE id = \(id)", logger: TestEnvironment.logger)
            for try await (status, attempts, due) in rows.decode((String, Int, Bool).self) {
                #expect(status == "pending" && attempts == 0 && due, "\(status), \(attempts) attempts, due: \(due)")
            }
            let sender = MailSender(
                client: client, transport: SMTPTransport(config: config(sink)), logger: TestEnvironment.logger,
                pollInterval: .milliseconds(100), retryBase: .zero, lease: .seconds(600))
            let running = Task { try await sender.run() }
            defer { running.cancel() }
            try await waitUntil(.seconds(30)) { try await Self.status(of: id, client) == "sent" }
            #expect(sink.messages().count == 1)
        }
    }

    /// A message withdrawn while a sender holds it (its link died mid-send) is not tried again: the
    /// sender, stopped mid-send, gives it back, and the next one marks it failed without sending it.
    @Test func aMessageWithdrawnWhileHeldIsNotTriedAgain() async throws {
        let database = try await TestDatabase.create(services: ["auth"])
        let sink = try await MailSink.start()
        defer { sink.stop() }
        try await withClient(database.config(for: "auth")) { (client: PostgresClient) async throws in
            try await MigrationRunner(client: client, schema: "auth", migrations: MailOutbox.migrations, logger: TestEnvironment.logger).run()
            let id = try await client.transaction(logger: TestEnvironment.logger) { connection in
                try await MailOutbox().enqueue(MailMessage(to: "gone@example.com", subject: "Gone", text: "t"), template: "test", on: connection, logger: TestEnvironment.logger)
            }
            let stopped = await Self.senderStalledMidSend(client)
            let held = try await client.checkedQuery(
                "UPDATE mail_outbox SET withdrawn_at = now() WHERE id = \(id) AND claimed_until > now() RETURNING true", decoding: Bool.self,
                logger: TestEnvironment.logger)
            #expect(held == [true], "the message is held while it is sent")
            stopped.cancel()
            _ = await stopped.result
            let sender = MailSender(
                client: client, transport: SMTPTransport(config: config(sink)), logger: TestEnvironment.logger,
                pollInterval: .milliseconds(100), retryBase: .zero, lease: .seconds(600))
            let running = Task { try await sender.run() }
            defer { running.cancel() }
            try await waitUntil(.seconds(30)) { try await Self.status(of: id, client) == "failed" }
            let ended = try await client.checkedQuery(
                "SELECT coalesce(last_error, '') || ', cleared: ' || (body_text = '' AND claimed_until IS NULL) FROM mail_outbox WHERE id = \(id)",
                decoding: String.self, logger: TestEnvironment.logger)
            #expect(ended == ["withdrawn, cleared: true"])
            try await Task.sleep(for: .milliseconds(300))
            #expect(sink.messages().isEmpty)
        }
    }

    /// A sender whose server takes the message and never answers, once it is sending it: the task to
    /// cancel, as a deploy stops a sender mid-send.
    static func senderStalledMidSend(_ client: PostgresClient) async -> Task<Void, any Error> {
        struct StallingTransport: MailTransport {
            let started: AsyncStream<Void>.Continuation
            func send(_ message: MailMessage, messageID: String) async throws {
                started.yield()
                try await Task.sleep(for: .seconds(3600))
            }
        }
        let (started, startedContinuation) = AsyncStream<Void>.makeStream()
        let stalled = MailSender(
            client: client, transport: StallingTransport(started: startedContinuation), logger: TestEnvironment.logger,
            pollInterval: .milliseconds(100), retryBase: .zero, lease: .seconds(600))
        let running = Task { try await stalled.run() }
        var sends = started.makeAsyncIterator()
        _ = await sends.next()
        return running
    }

    /// Through the checked path: the test that cuts the pool's connections polls this on the same
    /// pool, and a plain `query` written to a connection just closed waits forever.
    static func status(of id: UUID, _ client: PostgresClient) async throws -> String? {
        try await client.checkedQuery("SELECT status FROM mail_outbox WHERE id = \(id)", decoding: String.self, logger: TestEnvironment.logger).first
    }
}
