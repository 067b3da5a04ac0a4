import Foundation
import Logging
import Mailer
import PostgresNIO
import ServiceKit

/// The mails auth sends, as text and HTML, with the app's name and links from configuration. They
/// are committed to the mail outbox in the caller's transaction; `MailSender` delivers them.
struct AuthMailer: Sendable {
    let settings: MailSettings
    let outbox = MailOutbox()

    /// The address is not proven yet, so whoever typed it may not own it: the mail carries nothing
    /// they chose (no display name), only this server's words and links. The second link is for the
    /// mailbox's owner who did not sign up: it verifies the address *and* takes from the account
    /// whatever its maker set (`disown=1`; the page or app sends `{token, disown: true}`).
    func sendVerification(to email: String, token: OpaqueToken, on connection: PostgresConnection, logger: Logger) async throws {
        let link = settings.link(settings.verifyEmailURL, token: token.value)
        let disown = link + "&disown=1"
        let message = render(
            to: email, subject: "Confirm your email for \(settings.appName)",
            greeting: nil,
            paragraphs: ["Please confirm that this is your email address for \(settings.appName)."],
            action: ("Confirm email", link),
            footer: "The link works once and expires in 24 hours. If you did not sign up, someone else typed your address: "
                + "follow this link to make the account yours (it signs everyone out and lets you choose a password): \(disown)"
        )
        _ = try await outbox.enqueue(message, template: "verify_email", on: connection, logger: logger)
    }

    func sendPasswordReset(to email: String, name: String?, token: OpaqueToken, on connection: PostgresConnection, logger: Logger) async throws {
        let link = settings.link(settings.resetPasswordURL, token: token.value)
        let message = render(
            to: email, subject: "Reset your \(settings.appName) password",
            greeting: name,
            paragraphs: ["Someone (we hope you) asked to reset the password of your \(settings.appName) account."],
            action: ("Choose a new password", link),
            footer: "The link works once and expires in 1 hour. If you did not ask for it, ignore this mail: your password stays as it is."
        )
        _ = try await outbox.enqueue(message, template: "reset_password", on: connection, logger: logger)
    }

    func sendPasswordChanged(to email: String, name: String?, on connection: PostgresConnection, logger: Logger) async throws {
        let message = render(
            to: email, subject: "Your \(settings.appName) password was changed",
            greeting: name,
            paragraphs: ["The password of your \(settings.appName) account was just changed."],
            action: nil,
            footer: "If this was not you, reset your password at once from the app."
        )
        _ = try await outbox.enqueue(message, template: "password_changed", on: connection, logger: logger)
    }

    private func render(to: String, subject: String, greeting name: String?, paragraphs: [String], action: (label: String, url: String)?, footer: String) -> MailMessage {
        MailLayout(appName: settings.appName).message(
            to: to, subject: subject, greeting: name, paragraphs: paragraphs, links: action.map { [MailLayout.Link($0.label, $0.url)] } ?? [], footer: footer)
    }
}
