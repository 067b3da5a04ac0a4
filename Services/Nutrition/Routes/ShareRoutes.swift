import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import ServiceKit

/// Share links to a meal: made and revoked by its owner, opened by anyone with the link.
struct ShareRoutes {
    let nutrition: Nutrition

    func add(to router: Router<ServiceRequestContext>) {
        let meals = router.group("v1/meals", context: AuthenticatedContext.self)
        meals.post(":id/share", use: share)
        meals.delete(":id/share", use: unshare)
        router.get("v1/shared/:token", use: open)
        router.get("v1/shared/:token/card.png", use: card)
    }

    struct ShareLink: ResponseEncodable {
        var token: String
        var url: String
        var expiresAt: Date
        enum CodingKeys: String, CodingKey { case token, url, expiresAt = "expires_at" }
    }

    /// A link to a snapshot of the meal as it is now, working for `SHARE_TTL_DAYS`: the page
    /// (`SharedPageRoutes`), which a browser shows and a link preview reads. The token is kept only
    /// as its hash, so the response is never kept for an `Idempotency-Key` either: a retry with the
    /// key is `409 idempotency_answer_withheld`, and makes no second link.
    @Sendable func share(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<ShareLink> {
        let id = try context.mealID()
        let nutrition = self.nutrition
        let user = context.caller.userID
        let (token, expires) = try await nutrition.postgres.transaction(logger: context.logger) { connection in
            // Locked until the link is stored: a deletion of the meal waits for it and then ends it,
            // rather than miss a link made beside it that would keep the meal's photo.
            guard let meal = try await nutrition.meals.find(id, of: user, forUpdate: true, on: connection, logger: context.logger) else { throw MealRoutes.notFound }
            return try await nutrition.shares.create(for: meal, ttlDays: nutrition.settings.shareTTLDays, on: connection, logger: context.logger)
        }
        return EditedResponse(
            status: .created, headers: IdempotentResponse.holdsSecret,
            response: ShareLink(token: token.value, url: "\(nutrition.settings.publicAPIURL)/shared/\(token.value)", expiresAt: expires))
    }

    @Sendable func unshare(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        let id = try context.mealID()
        let nutrition = self.nutrition
        let user = context.caller.userID
        // The copies expired links kept go even when no link is live: the 404 comes after the commit.
        // The meal is locked as `share` locks it: a link being made beside this waits to be
        // committed and is then revoked with the others, rather than outlive the answer.
        let revoked = try await nutrition.postgres.transaction(logger: context.logger) { connection in
            guard try await nutrition.meals.find(id, of: user, forUpdate: true, on: connection, logger: context.logger) != nil else { throw MealRoutes.notFound }
            return try await nutrition.shares.revoke(meal: id, on: connection, logger: context.logger)
        }
        guard revoked else { throw APIError.notFound("The meal has no live share link.", code: "share_not_found") }
        return .noContent
    }

    static let unknown = APIError.notFound("No such share link.", code: "share_not_found")
    static let gone = APIError(.gone, code: "share_gone", detail: "This share link expired, was revoked, or its meal was deleted.")

    struct SharedMeal: ResponseEncodable {
        var snapshot: ShareSnapshot
        var expiresAt: Date
        func encode(to encoder: any Encoder) throws {
            try snapshot.encode(to: encoder)
            var json = encoder.container(keyedBy: AnyKey.self)
            try json.encode(snapshot.photoURL, forKey: AnyKey("photo_url"))
            try json.encode(expiresAt, forKey: AnyKey("expires_at"))
        }
    }

    /// The meal as it was shared: no user id, address or notes.
    @Sendable func open(_ request: Request, context: ServiceRequestContext) async throws -> SharedMeal {
        let (snapshot, expires) = try await lookup(context, counting: true)
        return SharedMeal(snapshot: snapshot, expiresAt: expires)
    }

    /// How long a client or a shared cache may keep a card without asking again: a card never
    /// changes while its link lives (the snapshot is fixed), but a revoked link's card may be shown
    /// from a cache this long after, so it is an hour, not the link's lifetime.
    static let cardMaxAge = 3600

    /// The share card: a 1200×630 PNG for link previews and the app's share sheet. Drawn on its
    /// first request and kept with the link, served with a strong `ETag` (the PNG's SHA-256) and
    /// `Cache-Control: public, max-age=3600, immutable` (never past the link's expiry); `If-None-Match`
    /// of its tag is `304`. An ended link is `410`, whatever was kept or is asked for.
    @Sendable func card(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        guard let token = context.parameters.get("token") else { throw Self.unknown }
        let nutrition = self.nutrition
        let found = try await nutrition.postgres.withConnectionOnItsLoop { connection in
            try await nutrition.shares.card(token, on: connection, logger: context.logger)
        }
        let (snapshot, kept, expires, keptPhoto): (ShareSnapshot, ShareStore.KeptCard?, Date, ByteBuffer?)
        switch found {
        case .live(let live, let card, let photo, let until): (snapshot, kept, expires, keptPhoto) = (live, card, until, photo)
        case .gone: throw Self.gone
        case .unknown: throw Self.unknown
        }
        let card: ShareStore.KeptCard
        if let kept {
            card = kept
        } else {
            let png = try await nutrition.cards.draw(
                .init(
                    mealName: snapshot.name, calories: snapshot.totals.calories, proteinG: snapshot.totals.proteinG, carbsG: snapshot.totals.carbsG,
                    fatG: snapshot.totals.fatG, score: snapshot.dietScore, band: snapshot.scoreBand, appName: nutrition.settings.appName,
                    photo: keptPhoto))
            card = try await nutrition.postgres.withConnectionOnItsLoop { connection in
                try await nutrition.shares.keepCard(token, png: ByteBuffer(bytes: png), on: connection, logger: context.logger)
            }
        }
        let etag = "\"\(card.etag)\""
        let maxAge = max(0, min(Self.cardMaxAge, Int(expires.timeIntervalSinceNow)))
        var headers: HTTPFields = [.eTag: etag, .cacheControl: "public, max-age=\(maxAge), immutable"]
        // If-None-Match compares weakly (RFC 9110 13.1.2): `W/"x"` matches `"x"`, as do `*` and a list.
        let matches = request.headers[.ifNoneMatch]?.split(separator: ",").contains { candidate in
            let tag = candidate.trimmingCharacters(in: .whitespaces)
            return tag == "*" || (tag.hasPrefix("W/") ? String(tag.dropFirst(2)) : tag) == etag
        }
        if matches == true { return Response(status: .notModified, headers: headers) }
        headers[.contentType] = "image/png"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: card.png))
    }

    func lookup(_ context: ServiceRequestContext, counting: Bool) async throws -> (ShareSnapshot, Date) {
        guard let token = context.parameters.get("token") else { throw Self.unknown }
        let nutrition = self.nutrition
        let found = try await nutrition.postgres.withConnectionOnItsLoop { connection in
            try await nutrition.shares.open(token, counting: counting, on: connection, logger: context.logger)
        }
        switch found {
        case .live(let snapshot, let expires): return (snapshot, expires)
        case .gone: throw Self.gone
        case .unknown: throw Self.unknown
        }
    }
}
