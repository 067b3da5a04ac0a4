import Foundation
import HTTPTypes
import Hummingbird
import Images
import NIOCore
import NIOPosix
import ServiceKit

/// `POST /v1/meals/analyze`: a photo of a plate becomes an analysed meal. The photo is checked and
/// cleaned as any meal photo, a copy at most 1024 pixels on its long side goes to the configured
/// vision model with the user's diet and hint, each food it names takes the food table's nutrients
/// when its name matches one well enough (else the model's estimate), and the meal is scored as a
/// typed one is. The meal, its photo and the day's count are stored together, after the model
/// answered: a failure leaves no meal and counts nothing.
struct AnalyzeRoutes {
    let nutrition: Nutrition

    func add(to router: Router<ServiceRequestContext>) {
        router.group("v1/meals", context: AuthenticatedContext.self).post("analyze", use: analyze)
    }

    static let maxHint = 500

    /// The form's fields other than the photo, checked.
    struct Fields: Sendable {
        var hint: String?
        var eatenAt: Date
        var name: String?

        init(_ form: MultipartForm?) throws {
            var problems: [Problem.FieldError] = []
            hint = form?.text("hint").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.flatMap { $0.isEmpty ? nil : $0 }
            if let hint, hint.unicodeScalars.count > AnalyzeRoutes.maxHint {
                problems.append(.init(field: "hint", message: "must be at most \(AnalyzeRoutes.maxHint) characters"))
            }
            name = form?.text("name").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            if let name, name.isEmpty || name.unicodeScalars.count > 200 { problems.append(.init(field: "name", message: "must be 1 to 200 characters")) }
            eatenAt = Date()
            if let text = form?.text("eaten_at") {
                if let date = RFC3339.strictDate(from: text) {
                    eatenAt = date
                    // Checked before the photo is decoded and the model asked, as a typed meal's is.
                    if let problem = MealDraft.eatenAtProblem(date) { problems.append(problem) }
                } else {
                    problems.append(.init(field: "eaten_at", message: "must be an RFC 3339 date-time with an offset, like 2026-11-28T12:30:00+01:00"))
                }
            }
            if !problems.isEmpty { throw APIError.validation(problems) }
        }

    }

    static func limitExceeded(_ allowance: MealAnalysisAllowance, cap: Int) -> APIError {
        let noun = cap == 1 ? "meal analysis" : "meal analyses"
        var detail = "You've reached the limit of \(cap) \(noun) today."
        var extensions: [String: JSONValue] = ["limit": .number(Double(cap)), "tier": .string(allowance.tier)]
        if let tier = allowance.upgradeTier {
            detail += " Upgrade to \(allowance.upgradeTierName ?? tier) for more."
            extensions["required_tier"] = .string(tier)
        }
        return APIError(.forbidden, code: "limit_exceeded", detail: detail, extensions: extensions)
    }

    static let allowanceUnknown = APIError(
        .serviceUnavailable, code: "allowance_unknown", detail: "The daily allowance is not known yet; try again in a moment.", headers: [.retryAfter: "5"])

    @Sendable func analyze(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<MealView> {
        let received = ContinuousClock.now
        let nutrition = self.nutrition
        guard let analyzer = nutrition.analyzer else { throw MealAnalyzer.notConfigured }
        let user = context.caller.userID
        let upload = try await MealPhoto.read(request, maxBytes: nutrition.settings.mealPhotoMaxBytes, multipartOnly: true)
        let fields = try Fields(upload.form)
        guard let format = ImageFormat(sniffing: upload.photo.readableBytesView) else { throw MealPhoto.unsupported() }

        return try await analyzer.withSlot { () async throws -> EditedResponse<MealView> in
            try await run(upload: upload, format: format, fields: fields, analyzer: analyzer, user: user, received: received, context: context)
        }
    }

    func run(
        upload: MealPhoto.Upload, format: ImageFormat, fields: Fields, analyzer: MealAnalyzer, user: UUID, received: ContinuousClock.Instant,
        context: AuthenticatedContext
    ) async throws -> EditedResponse<MealView> {
        let nutrition = self.nutrition
        // The allowance first: a user over it costs no decoding and no call.
        let (profile, allowance) = try await nutrition.postgres.withConnectionOnItsLoop { connection in
            let profile = try await nutrition.dietProfile(user, on: connection, logger: context.logger)
            guard let allowance = try await AllowanceStore().mealAnalyses(for: user, on: connection, logger: context.logger) else {
                throw Self.allowanceUnknown
            }
            if let cap = allowance.perDay,
                try await nutrition.analysisCounts.used(user, on: profile.localDay(of: Date()), on: connection, logger: context.logger) >= cap
            {
                throw Self.limitExceeded(allowance, cap: cap)
            }
            return (profile, allowance)
        }

        let (stored, forModel) = try await MealPhoto.cleanForAnalysis(upload.photo, format: format, decoding: nutrition.imageDecoding)
        let (answer, providerTime) = try await analyzer.analyze(
            VisionRequest(jpeg: forModel.bytes, prompt: ModelAnswer.prompt(diet: profile.diet, hint: fields.hint)), logger: context.logger)
        guard !answer.items.isEmpty else {
            throw APIError(.unprocessableContent, code: "no_food_found", detail: "No food was found in this photo. Try a photo of the plate from above.")
        }

        // The table's food for each item, looked up before the transaction: the table never changes.
        let matches = try await nutrition.postgres.withConnectionOnItsLoop { connection in
            var matches: [MatchedFood?] = []
            for found in answer.items { matches.append(try await nutrition.foods.match(found.name, near: found.per100g, on: connection, logger: context.logger)) }
            return matches
        }
        let id = UUID()
        let meal = try await nutrition.postgres.transaction(logger: context.logger) { connection in
            // The account may have been deleted during the call: nothing of it is kept then.
            try await connection.requireLiveAccount(user, logger: context.logger)
            var items: [MealItem] = []
            var analysed: [MealAnalysis.Item] = []
            for (found, match) in zip(answer.items, matches) {
                let per100g = match?.per100g ?? found.per100g
                var item = per100g.item(named: found.name, grams: found.grams, tags: found.tags.isEmpty ? nil : found.tags)
                item.ndbNumber = match?.ndbNumber
                items.append(item)
                let source =
                    match.map { MealAnalysis.Source(kind: "usda_sr", ndbNumber: $0.ndbNumber, description: $0.description) } ?? MealAnalysis.Source(kind: "model")
                analysed.append(MealAnalysis.Item(name: found.name, grams: found.grams, confidence: found.confidence, source: source))
            }
            let name = fields.name ?? (answer.mealName.isEmpty ? "Meal" : answer.mealName)
            let body = MealDraft.Body(name: name, eatenAt: fields.eatenAt, items: items.map(MealItemInput.amounts), notes: nil, photoURL: MealPhotoStore.path(of: id))
            let draft: MealDraft
            do {
                draft = try MealDraft(body, items: items, profile: profile, meal: id)
            } catch let error as APIError {
                context.logger.warning("analysed meal not valid", metadata: ["problem": "\(error)"])
                throw APIError(.badGateway, code: "analysis_failed", detail: "The photo analysis service did not give a usable answer; try again.")
            }
            let analysis = MealAnalysis(
                provider: analyzer.model.provider, model: analyzer.model.model, items: analysed, durationMs: Int(providerTime / .milliseconds(1)))
            // Counted where it is stored: another analysis that took the last one meanwhile
            // leaves this one uncounted and unstored.
            guard try await nutrition.analysisCounts.count(user, on: profile.localDay(of: Date()), cap: allowance.perDay, on: connection, logger: context.logger)
            else { throw Self.limitExceeded(allowance, cap: allowance.perDay ?? 0) }
            let meal = try await nutrition.meals.insert(draft, id: id, user: user, analysis: analysis, on: connection, logger: context.logger)
            try await nutrition.photos.put(stored, meal: id, user: user, on: connection, logger: context.logger)
            return meal
        }
        var created = meal
        created.version += 1
        // The provider's time and the whole request's, for whoever measures the server's own share
        // (the W3C's Server-Timing header; the provider's time is also in the answer).
        let total = ContinuousClock.now - received
        let timing = "provider;dur=\(Self.ms(providerTime)), total;dur=\(Self.ms(total))"
        return EditedResponse(
            status: .created, headers: [.eTag: EntityTag(version: created.version).description, HTTPField.Name("Server-Timing")!: timing],
            response: MealView(created))
    }

    static func ms(_ duration: Duration) -> String { String(format: "%.1f", duration / .milliseconds(1)) }
}
