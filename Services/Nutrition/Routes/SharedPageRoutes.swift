import Foundation
import Hummingbird
import ServiceKit

/// The page a share link opens (`<PUBLIC_API_URL>/shared/{token}`): the meal's snapshot as
/// `GET /v1/shared/{token}` serves it, with OpenGraph and Twitter tags so that a link preview shows
/// the share card. Ended links answer `410`, unknown ones `404`, each with a page.
struct SharedPageRoutes {
    let nutrition: Nutrition
    let pages: PageRenderer

    /// The templates in `Services/Nutrition/Pages` these routes render.
    static let templates = ["shared-meal"]

    func add(to router: Router<ServiceRequestContext>) {
        router.get("shared/:token", use: sharedPage)
    }

    @Sendable func sharedPage(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let token = context.parameters.get("token") ?? ""
        let nutrition = self.nutrition
        // Counts a view, as the API's read does: the page is where a shared link's reader lands.
        let found = try await nutrition.postgres.withConnectionOnItsLoop { connection in
            try await nutrition.shares.open(token, counting: true, on: connection, logger: context.logger)
        }
        switch found {
        case .unknown:
            return pages.message(
                status: .notFound, title: "This link is not valid", text: "No shared meal has this link. Check that the whole link was opened.")
        case .gone:
            return pages.message(
                status: .gone, title: "This shared meal is gone", text: "The link expired, or whoever shared the meal stopped sharing it or deleted it.")
        case .live(let snapshot, let expires):
            let base = nutrition.settings.publicAPIURL
            let totals = snapshot.totals
            let summary =
                "\(Self.number(totals.calories)) kcal · \(Self.number(totals.proteinG)) g protein · \(Self.number(totals.carbsG)) g carbs · "
                + "\(Self.number(totals.fatG)) g fat · diet score \(snapshot.dietScore)"
            let values: [String: Any] = [
                "name": snapshot.name,
                "summary": summary,
                "date": Self.day(snapshot.localDate),
                "page_url": "\(base)/shared/\(token)",
                // Absolute for link previews, which fetch it from elsewhere; the page itself loads it
                // from its own origin (the CSP's `img-src 'self'`).
                "card_url": "\(base)/v1/shared/\(token)/card.png",
                "card_path": "/v1/shared/\(token)/card.png",
                "calories": Self.number(totals.calories),
                "protein": Self.number(totals.proteinG),
                "carbs": Self.number(totals.carbsG),
                "fat": Self.number(totals.fatG),
                "score": snapshot.dietScore,
                "band": snapshot.scoreBand,
                "expires": DisplayDate.day(expires),
            ]
            return pages.page("shared-meal", title: snapshot.name, values: values)
        }
    }

    /// 330, or 12.5: the snapshot's totals are rounded to tenths.
    static func number(_ value: Double) -> String {
        value.rounded() == value ? String(format: "%.0f", value) : String(format: "%.1f", value)
    }

    /// "26 November 2026", from a `yyyy-MM-dd` local date (shown as it is if it is not one).
    static func day(_ localDate: String) -> String {
        let parser = DateFormatter()
        parser.locale = Locale(identifier: "en_US_POSIX")
        parser.timeZone = TimeZone(identifier: "UTC")
        parser.dateFormat = "yyyy-MM-dd"
        guard let date = parser.date(from: localDate) else { return localDate }
        return DisplayDate.day(date)
    }
}
