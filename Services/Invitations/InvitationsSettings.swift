import Mailer
import ServiceKit

/// The invitations service's own settings, read with the common ones.
struct InvitationsSettings: Sendable {
    /// How long an invitation's code works (`INVITATION_TTL_DAYS`); a resend starts it again.
    var invitationTTLDays: Int
    /// Invitations (new clients) one coach may create a day.
    var invitationsPerCoachPerDay: Int
    /// Invitation mails (the first and resends) one client may get a day.
    var mailsPerClientPerDay: Int
    /// Previews of an invitation (`GET /v1/invitations/{code}`) per client address a minute.
    var previewsPerMinute: Int
    /// How long an acceptance waits for auth to grant `client` before it answers `202`.
    var acceptRoleWait: Duration
    var appName: String
    /// `<APP_BASE_URL>/invite?code=…` is the mail's "Get started" link, a Universal Link into the app.
    var appBaseURL: String
    /// `<APP_SCHEME>://invite?code=…` opens the app where Universal Links do not.
    var appScheme: String
    var appStoreURL: String
    /// The app's Apple id (`APP_STORE_ID`, digits): the invitation page's Smart App Banner, none without it.
    var appStoreID: String?
    /// The invitation page's look (`APP_NAME`, `PAGE_ACCENT_COLOR`).
    var pages: PageSettings
    /// Where the API is reached from outside (the gateway): the unsubscribe link points there.
    var publicAPIURL: String
    var smtp: SMTPConfig

    init(_ config: ServiceConfig) throws {
        var env = EnvironmentReader(config.environment)
        invitationTTLDays = env.int("INVITATION_TTL_DAYS", default: 30, range: 1...365)
        invitationsPerCoachPerDay = env.int("INVITATIONS_PER_COACH_PER_DAY", default: 100, range: 1...100_000)
        mailsPerClientPerDay = env.int("INVITATION_MAILS_PER_CLIENT_PER_DAY", default: 5, range: 1...100)
        previewsPerMinute = env.int("INVITATION_PREVIEWS_PER_MINUTE", default: 30, range: 1...100_000)
        acceptRoleWait = env.milliseconds("ACCEPT_ROLE_WAIT_MS", default: 5_000, range: 0...60_000)
        appName = env.string("APP_NAME", default: "Food Backend")
        appBaseURL = Self.trimmed(env.string("APP_BASE_URL", default: "http://127.0.0.1:8080", requiredInProduction: true))
        appScheme = env.string("APP_SCHEME", default: "pfa")
        appStoreURL = env.string("APP_STORE_URL", default: "https://apps.apple.com/app/id0000000000", requiredInProduction: true)
        publicAPIURL = Self.trimmed(env.string("PUBLIC_API_URL", default: appBaseURL, requiredInProduction: true))
        appStoreID = env.optionalString("APP_STORE_ID")
        pages = PageSettings(reading: &env)
        smtp = SMTPConfig(reading: &env)
        if appScheme.isEmpty || !appScheme.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "+" || $0 == "-" || $0 == "." }) {
            env.report("APP_SCHEME must be a URL scheme (letters, digits, +, -, .), got \"\(appScheme)\"")
        }
        if let appStoreID, appStoreID.isEmpty || !appStoreID.allSatisfy({ $0.isASCII && $0.isNumber }) {
            env.report("APP_STORE_ID must be the app's Apple id (digits only), got \"\(appStoreID)\"")
        }
        try env.finish()
    }

    private static func trimmed(_ url: String) -> String {
        url.hasSuffix("/") ? String(url.dropLast()) : url
    }
}
