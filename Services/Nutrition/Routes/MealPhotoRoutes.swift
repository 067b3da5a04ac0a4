import Foundation
import Hummingbird
import ServiceKit

/// A meal's photo: kept cleaned (upright, sRGB, no metadata, at most 2048 pixels on its long side),
/// served to its owner and a linked coach; a share link serves the copy it took.
struct MealPhotoRoutes {
    let nutrition: Nutrition

    func add(to router: Router<ServiceRequestContext>) {
        let meals = router.group("v1/meals", context: AuthenticatedContext.self)
        meals.post(":id/photo", use: upload)
        meals.delete(":id/photo", use: remove)
        meals.get(":id/photo", use: photo)
        router.get("v1/shared/:token/photo", use: shared)
    }

    static let noPhoto = APIError.notFound("This meal has no photo.", code: "photo_not_found")

    /// Adds or replaces the photo; the meal as `GET /v1/meals/{id}` shows it, its `photo_url` the
    /// photo's path.
    @Sendable func upload(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<MealView> {
        let id = try context.mealID()
        let nutrition = self.nutrition
        let user = context.caller.userID
        // An unknown meal is 404 before the photo is decoded.
        let exists = try await nutrition.postgres.withConnectionOnItsLoop { connection in
            try await nutrition.meals.find(id, of: user, on: connection, logger: context.logger) != nil
        }
        guard exists else { throw MealRoutes.notFound }
        let upload = try await MealPhoto.read(request, maxBytes: nutrition.settings.mealPhotoMaxBytes)
        let image = try await MealPhoto.clean(upload.photo, decoding: nutrition.imageDecoding)
        let meal = try await nutrition.postgres.transaction(logger: context.logger) { connection in
            guard try await nutrition.meals.find(id, of: user, forUpdate: true, on: connection, logger: context.logger) != nil else { throw MealRoutes.notFound }
            try await nutrition.photos.put(image, meal: id, user: user, on: connection, logger: context.logger)
            return try await nutrition.meals.find(id, of: user, on: connection, logger: context.logger)!
        }
        return EditedResponse(headers: [.eTag: EntityTag(version: meal.version).description], response: MealView(meal))
    }

    @Sendable func remove(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        let id = try context.mealID()
        let nutrition = self.nutrition
        let user = context.caller.userID
        try await nutrition.postgres.transaction(logger: context.logger) { connection in
            guard try await nutrition.meals.find(id, of: user, forUpdate: true, on: connection, logger: context.logger) != nil else { throw MealRoutes.notFound }
            guard try await nutrition.photos.delete(meal: id, on: connection, logger: context.logger) else { throw Self.noPhoto }
        }
        return .noContent
    }

    /// The photo, to its owner and a coach linked to them; anyone else is `404`, as for a meal
    /// without one. Asked for by its owner with its version (`?v=`, the start of its ETag: a replaced
    /// photo has another), it may be kept for a year. Without `v`, with one of a photo replaced since,
    /// or to a coach (whose access ends with the link), it is checked again (its ETag) each time it
    /// is shown, so a replaced photo is never shown from a cache.
    @Sendable func photo(_ request: Request, context: AuthenticatedContext) async throws -> Response {
        let id = try context.mealID()
        let nutrition = self.nutrition
        let found = try await nutrition.postgres.withConnectionOnItsLoop { connection in
            try await nutrition.photos.find(meal: id, reader: context.caller.userID, on: connection, logger: context.logger)
        }
        guard let found else { throw Self.noPhoto }
        let version = request.uri.queryParameters["v"]
        let current = found.readByOwner && (version.map { $0.count == MealPhotoStore.versionLength && found.etag.hasPrefix($0) } ?? false)
        let cacheControl = current ? "private, max-age=31536000, immutable" : "private, no-cache"
        return MealPhoto.response((found.data, found.contentType, found.etag), cacheControl: cacheControl, request: request)
    }

    /// The photo as it was when the link was made, to anyone with the link while it lives; `410`
    /// after.
    @Sendable func shared(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        guard let token = context.parameters.get("token") else { throw ShareRoutes.unknown }
        let nutrition = self.nutrition
        let found = try await nutrition.postgres.withConnectionOnItsLoop { connection in
            try await nutrition.shares.photo(token, on: connection, logger: context.logger)
        }
        switch found {
        case .unknown: throw ShareRoutes.unknown
        case .gone: throw ShareRoutes.gone
        case .live(nil, _): throw Self.noPhoto
        case .live(let photo?, let expires):
            let maxAge = max(0, min(ShareRoutes.cardMaxAge, Int(expires.timeIntervalSinceNow)))
            return MealPhoto.response((photo.data, photo.contentType, photo.etag), cacheControl: "public, max-age=\(maxAge)", request: request)
        }
    }
}
