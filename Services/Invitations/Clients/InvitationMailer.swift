import Foundation
import Logging
import Mailer
import PostgresNIO
import ServiceKit

/// The invitation mail and the acceptance notice, committed to the mail outbox in the caller's
/// transaction; `MailSender` delivers them.
struct InvitationMailer: Sendable {
    let settings: InvitationsSettings
    let outbox = MailOutbox()

    var layout: MailLayout { MailLayout(appName: settings.appName) }

    /// The invitation: who invites, the App Store link, the Universal Link and the custom-scheme link
    /// with the code, the expiry, and one-click unsubscribe. Replies go to the coach.
    func sendInvitation(
        to email: String, clientName: String, coachName: String, coachEmail: String?, code: OpaqueToken, expiresAt: Date, unsubscribe: OpaqueToken,
        on connection: PostgresConnection, logger: Logger
    ) async throws -> UUID {
        let expiry = DisplayDate.day(expiresAt)
        let message = layout.message(
            to: email, subject: "You're invited to \(coachName)'s program", greeting: clientName,
            paragraphs: [
                "\(coachName) invited you to train together in \(settings.appName). Welcome!",
                "Install the app, sign in with Apple, Google or your email (\(email)), and you are connected with \(coachName).",
            ],
            links: [
                MailLayout.Link("Get started", "\(settings.appBaseURL)/invite?code=\(code.value)"),
                MailLayout.Link("Open in the app", "\(settings.appScheme)://invite?code=\(code.value)"),
                MailLayout.Link("Get the app on the App Store", settings.appStoreURL),
            ],
            footer: "This invitation works until \(expiry). If you do not know \(coachName), ignore this mail.",
            replyTo: coachEmail, unsubscribeURL: "\(settings.publicAPIURL)/v1/invitations/unsubscribe?token=\(unsubscribe.value)")
        return try await outbox.enqueue(message, template: "invitation", on: connection, logger: logger)
    }

    /// To the invited address, when someone accepted with a private-relay address instead: the
    /// owner of the invited address learns of it.
    func sendRelayNotice(to email: String, coachName: String, on connection: PostgresConnection, logger: Logger) async throws {
        let message = layout.message(
            to: email, subject: "Your invitation to \(coachName)'s program was accepted", greeting: nil,
            paragraphs: [
                "The invitation \(coachName) sent to this address was just accepted in \(settings.appName) by an account that signs in with Apple and hides its address."
            ],
            footer: "If that was not you, tell \(coachName): the invitation link was opened by someone else.")
        _ = try await outbox.enqueue(message, template: "invitation_relay_notice", on: connection, logger: logger)
    }
}
