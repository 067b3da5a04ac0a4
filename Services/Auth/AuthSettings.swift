import Foundation
import Mailer
import ServiceKit

/// The auth service's own settings, read from the environment with the kit's reader so that every
/// problem is named at once. Defaults serve `scripts/stack` on one machine.
struct AuthSettings: Sendable {
    var bcryptCost: Int
    var signing: SigningKeys
    var accessTokenTTL: Duration
    var sessionIdleDays: Int
    /// How long after a refresh token is exchanged it may be presented again while what it was
    /// exchanged for is unused: an answer lost on the way (a network handover, an app suspended
    /// mid-refresh) would otherwise end the session. Zero: never.
    var refreshReuseGrace: Duration
    var throttle: LoginThrottle.Limits
    /// Verification-mail resends allowed per user per hour.
    var resendPerHour: Int
    /// Sign-ups per client address (an IPv6 one by its /64) per hour: each costs a password hash, and
    /// each response says whether an address has an account.
    var signupsPerHourPerIP: Int
    var adminEmails: Set<String>
    var coachSelfServe: Bool
    /// How recent a provider sign-in must be to delete an account that has no password.
    var reauthWindow: Duration
    var mail: MailSettings
    /// The pages the mails' links open (`APP_NAME`, `PAGE_ACCENT_COLOR`).
    var pages: PageSettings
    var smtp: SMTPConfig
    var apple: IdentityProviderConfig?
    var google: IdentityProviderConfig?
    /// Whether a provider sign-in must carry a nonce this service issued (`PROVIDER_NONCE_REQUIRED`).
    /// Off only for app versions already shipped without one: such a sign-in is then spent under what
    /// its ID token's issuer signed instead, so each needs a fresh token.
    var providerNonceRequired: Bool
    var issuer: String
    var audience: String

    init(_ config: ServiceConfig) throws {
        var env = EnvironmentReader(config.environment)
        bcryptCost = env.int("BCRYPT_COST", default: 10, range: 4...16)
        signing = SigningKeys(reading: &env)
        // At most 15 minutes: an ended session's access token is accepted elsewhere until it expires.
        accessTokenTTL = .seconds(env.int("ACCESS_TOKEN_TTL_SECONDS", default: 900, range: 60...900))
        sessionIdleDays = env.int("SESSION_IDLE_DAYS", default: 30, range: 1...365)
        refreshReuseGrace = .seconds(env.int("REFRESH_REUSE_GRACE_SECONDS", default: 60, range: 0...300))
        // An account's own failures block only the address they come from (a stranger must not be able
        // to lock the owner out); across addresses they slow each further attempt instead.
        throttle = LoginThrottle.Limits(
            perAccountAndIP: env.int("LOGIN_MAX_FAILURES_PER_ACCOUNT", default: 5, range: 1...1_000),
            perIP: env.int("LOGIN_MAX_FAILURES_PER_IP", default: 20, range: 1...100_000),
            slowAfter: env.int("LOGIN_SLOW_AFTER_FAILURES", default: 10, range: 1...100_000),
            maxDelay: .milliseconds(env.int("LOGIN_MAX_DELAY_MS", default: 5_000, range: 0...60_000)),
            window: .seconds(env.int("LOGIN_FAILURE_WINDOW_SECONDS", default: 900, range: 10...86_400))
        )
        resendPerHour = env.int("EMAIL_VERIFY_RESEND_PER_HOUR", default: 3, range: 1...100)
        signupsPerHourPerIP = env.int("SIGNUP_MAX_PER_IP_PER_HOUR", default: 100, range: 1...1_000_000)
        var admins: Set<String> = []
        for entry in (env.optionalString("ADMIN_EMAILS") ?? "").split(separator: ",") where !entry.trimmingCharacters(in: .whitespaces).isEmpty {
            // Compared with the accounts' canonical addresses: an entry that has none could never match.
            guard let address = EmailAddress(String(entry)) else {
                env.report("ADMIN_EMAILS: \"\(entry.trimmingCharacters(in: .whitespaces))\" is not a valid email address")
                continue
            }
            admins.insert(address.canonical)
        }
        adminEmails = admins
        coachSelfServe = env.bool("COACH_SELF_SERVE", default: true)
        reauthWindow = .seconds(env.int("REAUTH_WINDOW_SECONDS", default: 300, range: 10...86_400))
        mail = MailSettings(reading: &env)
        pages = PageSettings(reading: &env)
        smtp = SMTPConfig(reading: &env)
        apple = IdentityProviderConfig.apple(reading: &env)
        google = IdentityProviderConfig.google(reading: &env)
        providerNonceRequired = env.bool("PROVIDER_NONCE_REQUIRED", default: true)
        issuer = config.tokens.issuer
        audience = config.tokens.audience
        try env.finish()
    }
}

/// What the mails say and where their links go.
struct MailSettings: Sendable {
    var appName: String
    /// The link in the verification mail; the token is appended as `token=…`.
    var verifyEmailURL: String
    /// The link in the password-reset mail; the token is appended as `token=…`.
    var resetPasswordURL: String

    init(appName: String, verifyEmailURL: String, resetPasswordURL: String) {
        self.appName = appName
        self.verifyEmailURL = verifyEmailURL
        self.resetPasswordURL = resetPasswordURL
    }

    init(reading env: inout EnvironmentReader) {
        appName = env.string("APP_NAME", default: "Food Backend")
        let base = env.string("APP_BASE_URL", default: "http://127.0.0.1:8080", requiredInProduction: true)
        verifyEmailURL = env.string("EMAIL_VERIFY_URL", default: base + "/verify-email")
        resetPasswordURL = env.string("PASSWORD_RESET_URL", default: base + "/reset-password")
    }

    func link(_ base: String, token: String) -> String {
        base + (base.contains("?") ? "&" : "?") + "token=" + token
    }
}
