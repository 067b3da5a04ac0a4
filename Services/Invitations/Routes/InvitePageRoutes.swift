import Foundation
import Hummingbird
import ServiceKit

/// The page the invitation mail's "Get started" link opens (`<APP_BASE_URL>/invite?code=…`) where
/// the app does not take the link itself: who invites, a button into the app, the App Store. It
/// reads the invitation as the preview does and takes nothing: accepting is the app's, signed in.
struct InvitePageRoutes {
    let invitations: Invitations
    let pages: PageRenderer

    /// The templates in `Services/Invitations/Pages` these routes render.
    static let templates = ["invite", "unsubscribe"]

    func add(to router: Router<ServiceRequestContext>) {
        router.get("invite", use: invitePage)
        router.get("v1/invitations/unsubscribe", use: unsubscribePage)
    }

    @Sendable func invitePage(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let code = request.uri.queryParameters["code"].map(String.init) ?? ""
        let found: (client: ClientRecord, coach: AccountRecord?)?
        do {
            found = try await invitations.lookUp(code: code, clientAddress: context.clientAddress, logger: context.logger)
        } catch let error as APIError where error.status == .tooManyRequests {
            return pages.message(status: error.status, title: "Please wait a moment", text: error.detail, headers: error.headers)
        }
        guard let (client, coach) = found else { return notFound() }
        let newOne = "Ask your coach to send you a new invitation."
        switch client.status {
        case .revoked:
            return pages.message(status: .gone, title: "This invitation was withdrawn", text: "Your coach withdrew it, so it no longer works.", hint: newOne)
        case .expired:
            return pages.message(status: .gone, title: "This invitation has expired", text: "It no longer works.", hint: newOne)
        case .accepted, .left:
            return pages.message(
                status: .gone, title: "This invitation was already used", text: "It was accepted, and no longer works.", hint: "Open the app to see your coach.")
        case .pending:
            break
        }
        let settings = invitations.settings
        let values: [String: Any] = [
            "coach_name": coach.map(Invitations.coachName) ?? "your coach",
            "client_name": client.name as Any,
            "app_link": "\(settings.appScheme)://invite?code=\(code)",
            "app_store_url": settings.appStoreURL,
            "app_store_id": settings.appStoreID as Any,
            // The Smart App Banner hands the app the page's own address, as a Universal Link would.
            "invite_url": "\(settings.appBaseURL)/invite?code=\(code)",
            "expires": DisplayDate.day(client.expiresAt),
        ]
        return pages.page("invite", title: "You're invited", values: values)
    }

    /// The page a person lands on from the mail's unsubscribe link: a button that POSTs, since a
    /// GET must not unsubscribe (mail scanners open every link). A page like the others, with their
    /// headers: no framing (a framed button is a click someone else can steer), no referrer.
    @Sendable func unsubscribePage(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let token = request.uri.queryParameters["token"].map(String.init) ?? ""
        let action = "/v1/invitations/unsubscribe?token=" + (token.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")
        return pages.page("unsubscribe", title: "Unsubscribe", values: ["action": action])
    }

    func notFound() -> Response {
        pages.message(
            status: .notFound, title: "This invitation link is not valid", text: "Check that the whole link was opened: some mail apps cut long links.",
            hint: "Or ask your coach to send the invitation again.")
    }
}
