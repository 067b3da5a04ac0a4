import Foundation
import Hummingbird
import ServiceKit

/// The pages the mails' links open in a browser (`EMAIL_VERIFY_URL`, `PASSWORD_RESET_URL`), where
/// the app does not take the link itself. Opening a link changes nothing: mail scanners open every
/// link, so only a form's POST confirms or resets, through the same `Accounts` calls as the API.
struct PageRoutes {
    let accounts: Accounts
    let pages: PageRenderer

    /// The templates in `Services/Auth/Pages` these routes render.
    static let templates = ["verify-email", "reset-password"]

    func add(to router: Router<ServiceRequestContext>) {
        router.get("verify-email", use: verifyPage)
        router.post("verify-email", use: verify)
        router.get("reset-password", use: resetPage)
        router.post("reset-password", use: reset)
    }

    // MARK: verification

    /// The link's state, then the two forms: the account's password, or "I did not sign up".
    @Sendable func verifyPage(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let token = request.uri.queryParameters["token"].map(String.init) ?? ""
        if let spent = try await spentLink(token, purpose: .verifyEmail, context: context) { return spent }
        return verifyForm(token: token)
    }

    /// `POST /v1/auth/email/verify` from the page: `password`, or `disown=1`. The page proves nothing
    /// with a session (a browser has none here), so a wrong or missing password shows the form again.
    @Sendable func verify(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let form: [String: String]
        do {
            form = try await FormBody.fields(of: request, allowed: ["token", "password", "disown"])
        } catch let error as FormBodyError {
            return pages.message(for: error)
        }
        let token = form["token"] ?? ""
        let password = form["password"].flatMap { $0.isEmpty ? nil : $0 }
        guard form["disown"] == nil || form["disown"] == "1" else {
            return pages.message(status: .badRequest, title: "Something went wrong", text: "The form could not be read.", hint: "Open the link from the mail again.")
        }
        let disown = form["disown"] == "1"
        let verified: Accounts.Verified
        do {
            verified = try await accounts.verifyEmail(
                token: token, password: disown ? form["password"] : password, disown: disown, caller: nil, clientAddress: context.clientAddress, logger: context.logger)
        } catch let error as APIError {
            if let state = Self.linkState(of: error) { return linkPage(state, purpose: .verifyEmail) }
            switch error.code {
            case "invalid_credentials": return verifyForm(token: token, status: .unauthorized, error: error.detail)
            case "proof_required": return verifyForm(token: token, status: .unauthorized, error: "Enter the password of the account to confirm the address.")
            default:
                // Too many wrong passwords (429 with its Retry-After), or a form the page did not send.
                if error.status == .tooManyRequests { return verifyForm(token: token, status: error.status, error: error.detail, headers: error.headers) }
                return pages.message(status: error.status, title: "Something went wrong", text: error.detail)
            }
        }
        guard let passwordToken = verified.passwordToken else {
            return pages.message(status: .ok, title: "Your address is confirmed", text: "Thank you. You can go back to the app.")
        }
        // Disowned: the account is the mailbox owner's now, with no password yet; the set-password form
        // comes at once, with the single-use token the verification gave.
        return resetForm(
            token: passwordToken, heading: "This account is now yours",
            intro: "Your address is confirmed, and whoever made the account is signed out. Choose a password to sign in to the app with.")
    }

    func verifyForm(token: String, status: HTTPResponse.Status = .ok, error: String? = nil, headers: HTTPFields = [:]) -> Response {
        pages.page("verify-email", status: status, title: "Confirm your email address", values: ["token": token, "error": error as Any], headers: headers)
    }

    // MARK: password reset

    @Sendable func resetPage(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let token = request.uri.queryParameters["token"].map(String.init) ?? ""
        if let spent = try await spentLink(token, purpose: .resetPassword, context: context) { return spent }
        return resetForm(token: token)
    }

    /// `POST /v1/auth/password/reset` from the page, with the password typed twice.
    @Sendable func reset(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let form: [String: String]
        do {
            form = try await FormBody.fields(of: request, allowed: ["token", "password", "password_confirmation"])
        } catch let error as FormBodyError {
            return pages.message(for: error)
        }
        let token = form["token"] ?? ""
        // A link that no longer works says so before anything about the passwords.
        if let spent = try await spentLink(token, purpose: .resetPassword, context: context) { return spent }
        let password = form["password"] ?? ""
        guard password == form["password_confirmation"] ?? "" else {
            return resetForm(token: token, status: .badRequest, error: "The two passwords are not the same. Type the new password twice.")
        }
        do {
            try await accounts.resetPassword(token: token, password: password, logger: context.logger)
        } catch let error as APIError {
            if let state = Self.linkState(of: error) { return linkPage(state, purpose: .resetPassword) }
            if error.code == "weak_password" { return resetForm(token: token, status: error.status, error: error.detail) }
            return pages.message(status: error.status, title: "Something went wrong", text: error.detail)
        }
        return pages.message(
            status: .ok, title: "Your password is changed", text: "Sign in with it in the app.", hint: "Every device that was signed in to the account has been signed out.")
    }

    func resetForm(token: String, status: HTTPResponse.Status = .ok, error: String? = nil, heading: String = "Choose a new password", intro: String? = nil) -> Response {
        pages.page(
            "reset-password", status: status, title: heading, values: ["token": token, "heading": heading, "intro": intro as Any, "error": error as Any])
    }

    // MARK: links that no longer work

    /// The page for a link that is unknown, expired or used (`nil` while it works): 404 or 410, in words.
    func spentLink(_ token: String, purpose: EmailTokenStore.Purpose, context: ServiceRequestContext) async throws -> Response? {
        // A token is 43 characters; anything far longer was not made here and costs no query.
        var state = EmailTokenStore.Consumed.unknown
        if !token.isEmpty, token.utf8.count <= 256 { state = try await accounts.mailToken(token, purpose: purpose, logger: context.logger) }
        if case .valid = state { return nil }
        return linkPage(state, purpose: purpose)
    }

    func linkPage(_ state: EmailTokenStore.Consumed, purpose: EmailTokenStore.Purpose) -> Response {
        let newLink = purpose == .verifyEmail ? "In the app, ask for a new confirmation mail." : "In the app, ask for a new password reset mail."
        switch state {
        case .expired:
            return pages.message(status: .gone, title: "This link has expired", text: "Links in our mails work for a limited time.", hint: newLink)
        case .used:
            let text = purpose == .verifyEmail ? "This link was already used: the address may well be confirmed already." : "This link was already used to set a password."
            return pages.message(status: .gone, title: "This link was already used", text: text, hint: newLink)
        case .unknown, .valid:
            return pages.message(
                status: .notFound, title: "This link is not valid", text: "Check that the whole link was opened: some mail apps cut long links.", hint: newLink)
        }
    }

    /// The link's state an `AuthErrors.mailToken` problem stands for.
    static func linkState(of error: APIError) -> EmailTokenStore.Consumed? {
        switch error.code {
        case "token_expired": .expired
        case "token_used": .used
        case "invalid_token": .unknown
        default: nil
        }
    }
}
