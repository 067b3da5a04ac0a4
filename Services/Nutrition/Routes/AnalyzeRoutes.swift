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
/// typed one is. The day's count is taken before the call, and given back when the analysis fails
/// on this server's side or the provider gave no answer of the model's (`givesBack`); the meal and
/// its photo are stored together once the model answered.
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
            // Checked here, before the model is asked, as everything the meal's row will hold: a
            // NUL, which PostgreSQL refuses, would otherwise fail the meal's insert after the call.
            if let hint, hint.codePoints > AnalyzeRoutes.maxHint || hint.replacingOccurrences(of: "\r\n", with: "\n").hasInvisibleCharacters(allowing: ["\n", "\t"]) {
                problems.append(.init(field: "hint", message: "must be at most \(AnalyzeRoutes.maxHint) characters, without control or invisible characters"))
            }
            name = form?.text("name").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            if let name, name.isEmpty || name.codePoints > 200 || name.hasInvisibleCharacters() {
                problems.append(.init(field: "name", message: "must be 1 to 200 characters, without control or invisible characters"))
            }
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

        return try await analyzer.withSlot(for: user) { () async throws -> EditedResponse<MealView> in
            try await run(upload: upload, format: format, fields: fields, analyzer: analyzer, user: user, received: received, context: context)
        }
    }

    func run(
        upload: MealPhoto.Upload, format: ImageFormat, fields: Fields, analyzer: MealAnalyzer, user: UUID, received: ContinuousClock.Instant,
        context: AuthenticatedContext
    ) async throws -> EditedResponse<MealView> {
        let nutrition = self.nutrition
        // The allowance first, and taken at once: a user over it costs no decoding and no call, and
        // analyses run at once cannot all take the last one. It is given back when the analysis
        // fails on this server's side or the provider gave no answer (`givesBack`), and kept once
        // the model has worked on the photo: finding no food there, declining it, an answer that
        // is no use or no answer in the whole timeout is a call made.
        let (profile, day) = try await nutrition.postgres.transaction(logger: context.logger) { connection in
            // The count is the account's row: never made for one deleted, whose rows are gone.
            try await connection.requireLiveAccount(user, logger: context.logger)
            let profile = try await nutrition.dietProfile(user, on: connection, logger: context.logger)
            guard let allowance = try await AllowanceStore().mealAnalyses(for: user, on: connection, logger: context.logger) else {
                throw Self.allowanceUnknown
            }
            let day = profile.localDay(of: Date())
            guard try await nutrition.analysisCounts.count(user, on: day, cap: allowance.perDay, on: connection, logger: context.logger) else {
                throw Self.limitExceeded(allowance, cap: allowance.perDay ?? 0)
            }
            return (profile, day)
        }
        var stage = ModelStage.notAsked
        do {
            return try await analyze(upload: upload, format: format, fields: fields, analyzer: analyzer, user: user, profile: profile, received: received, stage: &stage, context: context)
        } catch {
            if Self.givesBack(error, stage: stage) {
                do {
                    try await nutrition.postgres.withConnectionOnItsLoop { connection in
                        try await nutrition.analysisCounts.giveBack(user, on: day, on: connection, logger: context.logger)
                    }
                } catch let failure {
                    context.logger.warning("an analysis that failed stays counted", metadata: ["error": "\(failure)"])
                }
            } else if var counted = error as? APIError {
                // Counted: a retry with its key is told the same again, not asked and counted again.
                counted.answersRetries = true
                throw counted
            }
            throw error
        }
    }

    /// How far an analysis got with the model.
    enum ModelStage {
        case notAsked
        case asked
        /// The model worked on the photo (`MealAnalyzer.analyze`'s `worked`).
        case worked
    }

    /// Whether an analysis that failed with `error` gives its count back: yes when the model was
    /// not asked (the photo's problems), when the provider gave no answer (out of reach, refusing
    /// the call) or this server failed; no when the model found no food or declined the photo,
    /// when its answer was no use (`502 analysis_failed`) or did not come in the whole timeout
    /// (`503 analyzer_unavailable`), and when the client left after asking. A hint can ask a model
    /// for an answer the schema does not allow, or to think past the timeout: given back, either
    /// would make analyses free.
    static func givesBack(_ error: any Error, stage: ModelStage) -> Bool {
        if stage == .notAsked { return true }
        if error is CancellationError { return false }
        guard let error = error as? APIError else { return true }
        if ["no_food_found", "analysis_refused", "account_deleted"].contains(error.code) { return false }
        return !(stage == .worked && ["analysis_failed", "analyzer_unavailable"].contains(error.code))
    }

    /// The analysis itself, its count taken: the photo cleaned, the model asked (`stage` moved on
    /// just before, and again once it worked on the photo), the foods matched, and the meal and its
    /// photo stored.
    func analyze(
        upload: MealPhoto.Upload, format: ImageFormat, fields: Fields, analyzer: MealAnalyzer, user: UUID, profile: DietProfile, received: ContinuousClock.Instant,
        stage: inout ModelStage, context: AuthenticatedContext
    ) async throws -> EditedResponse<MealView> {
        let nutrition = self.nutrition
        let (stored, forModel) = try await MealPhoto.cleanForAnalysis(upload.photo, format: format, decoding: nutrition.imageDecoding)
        stage = .asked
        var worked = false
        defer { if worked { stage = .worked } }
        let (answer, providerTime) = try await analyzer.analyze(
            VisionRequest(jpeg: forModel.bytes, prompt: ModelAnswer.prompt(diet: profile.diet, hint: fields.hint)), logger: context.logger, worked: &worked)
        guard !answer.items.isEmpty else {
            var noFood = APIError(.unprocessableContent, code: "no_food_found", detail: "No food was found in this photo. Try a photo of the plate from above.")
            // Counted, and a retry with its key is told so again without another call.
            noFood.answersRetries = true
            throw noFood
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
                // The table's food's tags and the model's: each says what the plate holds, and an
                // allergy's warning or the diet's rule is better raised by either than by neither.
                // The table's first, within the 20 an item holds.
                let table = match?.tags ?? []
                let tags = Array((table + found.tags.filter { !table.contains($0) }).prefix(20))
                var item = per100g.item(named: found.name, grams: found.grams, tags: tags.isEmpty ? nil : tags)
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
