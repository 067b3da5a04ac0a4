import FoodBackendAPI
import Foundation
import OpenAPIRuntime

extension FoodBackend {
    /// Adds or replaces a meal's photo from the image's bytes (JPEG, PNG, WebP or HEIC, told by its
    /// first bytes); the server keeps it cleaned and answers the meal with its `photo_url`.
    public func uploadMealPhoto(_ image: Data, mealID: String) async throws -> Components.Schemas.Meal {
        try await send { try await $0.postV1MealsIdPhoto(path: .init(id: mealID), body: .image_Ast_(HTTPBody(image))).ok.body.json }
    }

    /// Has the vision model read a photo of a meal and logs it, not yet eaten. `hint` is what the
    /// photo does not show ("no dressing"); `eatenAt` is now and `name` the model's when absent. The
    /// call carries one `Idempotency-Key` across its retries, so a retried analysis is made and
    /// counted once; `idempotencyKey` is that key when the app sends the same photo again itself
    /// (after the client gave up offline, or at the next launch), so that the app's retry is too.
    public func analyzeMeal(
        photo: Data, hint: String? = nil, eatenAt: Date? = nil, name: String? = nil, idempotencyKey: String? = nil
    ) async throws -> Components.Schemas.Meal {
        typealias Part = Operations.PostV1MealsAnalyze.Input.Body.MultipartFormPayload
        var parts: [Part] = [.photo(.init(payload: .init(body: HTTPBody(photo)), filename: "meal"))]
        if let hint { parts.append(.hint(.init(payload: .init(body: HTTPBody(hint))))) }
        if let eatenAt { parts.append(.eatenAt(.init(payload: .init(body: HTTPBody(try RFC3339DateTranscoder().encode(eatenAt)))))) }
        if let name { parts.append(.name(.init(payload: .init(body: HTTPBody(name))))) }
        let body = MultipartBody(parts)
        return try await send {
            try await $0.postV1MealsAnalyze(headers: .init(idempotencyKey: idempotencyKey), body: .multipartForm(body)).created.body.json
        }
    }
}
