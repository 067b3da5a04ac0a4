import Foundation
import Logging
import NIOCore
import ServiceKit
import Synchronization

/// The configured vision model with what guards its calls: at most `concurrency` at once in this
/// process (one more is `503 analyzer_busy` at once, not a queue that grows), at most
/// `concurrencyPerUser` of them one user's (`429 too_many_analyses`), each bounded by the timeout,
/// and an answer the schema does not allow asked for once more before giving up.
final class MealAnalyzer: Sendable {
    let model: any VisionModel
    let timeout: Duration
    let concurrency: Int
    let concurrencyPerUser: Int
    private struct Running {
        var total = 0
        var byUser: [UUID: Int] = [:]
    }
    private let running = Mutex(Running())

    init(model: any VisionModel, timeout: Duration, concurrency: Int, concurrencyPerUser: Int = 2) {
        self.model = model
        self.timeout = timeout
        self.concurrency = concurrency
        self.concurrencyPerUser = concurrencyPerUser
    }

    /// The analyzer `settings` name, or nil when none is.
    static func configured(_ settings: AnalyzerSettings, http: VisionHTTP) -> MealAnalyzer? {
        let model: any VisionModel
        switch settings.provider {
        case nil: return nil
        case .gemini:
            model = GeminiModel(http: http, base: settings.url, model: settings.model, apiKey: settings.apiKey ?? "", maxOutputTokens: settings.maxOutputTokens)
        case .openai:
            model = OpenAIModel(http: http, base: settings.url, model: settings.model, apiKey: settings.apiKey, maxOutputTokens: settings.maxOutputTokens)
        }
        return MealAnalyzer(model: model, timeout: settings.timeout, concurrency: settings.concurrency, concurrencyPerUser: settings.concurrencyPerUser)
    }

    static let notConfigured = APIError(
        .serviceUnavailable, code: "analyzer_not_configured",
        detail: "Photo analysis is off on this server: set ANALYZER_PROVIDER (gemini or openai), with ANALYZER_API_KEY and ANALYZER_MODEL, to turn it on.")

    static let busy = APIError(
        .serviceUnavailable, code: "analyzer_busy", detail: "The server is analysing as many photos as it can right now; try again in a moment.",
        headers: [.retryAfter: "1"])

    static let userBusy = APIError(
        .tooManyRequests, code: "too_many_analyses", detail: "Your other photos are still being analysed; try again when one is done.",
        headers: [.retryAfter: "1"])

    /// `work` holding one of the call slots for `user`, or at once `503 analyzer_busy` when none is
    /// free, `429 too_many_analyses` when the user holds their share.
    func withSlot<Result>(for user: UUID, _ work: () async throws -> Result) async throws -> Result {
        let refusal: APIError? = running.withLock { running in
            guard running.total < concurrency else { return Self.busy }
            guard running.byUser[user, default: 0] < concurrencyPerUser else { return Self.userBusy }
            running.total += 1
            running.byUser[user, default: 0] += 1
            return nil
        }
        if let refusal { throw refusal }
        defer {
            running.withLock { running in
                running.total -= 1
                let left = running.byUser[user, default: 1] - 1
                running.byUser[user] = left > 0 ? left : nil
            }
        }
        return try await work()
    }

    /// The provider refused the call itself: not the client's to retry, and not a wait's to mend.
    static let refusedCall = APIError(
        .badGateway, code: "analysis_failed", detail: "The photo analysis service refused this server's request; the server's analyzer settings need attention.")

    /// The model's answer and how long the provider took; a malformed answer is asked for again
    /// once, while half the timeout is left. Both calls share the timeout, so an analysis never
    /// keeps the model longer than it, nor its client past the gateway's `UPSTREAM_TIMEOUT_MS`
    /// with the default. Errors are the API's: `503 analyzer_unavailable`, `502 analysis_failed`,
    /// `422 analysis_refused`. `worked` is set once the model has worked on the photo: it answered,
    /// usable or not, or took the whole timeout; either is a call the provider counts, and either a
    /// hint can ask of the model.
    func analyze(_ request: VisionRequest, logger: Logger, worked: inout Bool) async throws -> (ModelAnswer, Duration) {
        let started = ContinuousClock.now
        var lastProblem = ""
        for attempt in 1...2 {
            let left = timeout - (ContinuousClock.now - started)
            if attempt > 1, left < timeout / 2 {
                logger.warning("vision model answer unusable, and too little time left to ask again", metadata: ["provider": "\(model.provider)"])
                break
            }
            do {
                let text = try await model.answer(request, timeout: left)
                worked = true
                if let answer = ModelAnswer(json: text) { return (answer, ContinuousClock.now - started) }
                lastProblem = "the answer does not match the schema"
            } catch .malformed(let reason) {
                lastProblem = reason
            } catch .unusable(let reason) {
                worked = true
                lastProblem = reason
            } catch .unavailable(let retryAfter, let reason) {
                logger.warning("vision model unavailable", metadata: ["provider": "\(model.provider)", "reason": "\(reason)"])
                // Retry-After as the provider gave it (seconds or an HTTP date), else a few seconds.
                let wait = retryAfter.flatMap { $0.isEmpty ? nil : $0 } ?? "5"
                throw APIError(
                    .serviceUnavailable, code: "analyzer_unavailable", detail: "The photo analysis service is unavailable right now; try again later.",
                    headers: [.retryAfter: wait])
            } catch .timedOut(let reason) {
                worked = true
                logger.warning("vision model gave no answer in time", metadata: ["provider": "\(model.provider)", "reason": "\(reason)"])
                throw APIError(
                    .serviceUnavailable, code: "analyzer_unavailable", detail: "The photo analysis service is unavailable right now; try again later.",
                    headers: [.retryAfter: "5"])
            } catch .rejected(let reason) {
                logger.error("vision model refused the call: check ANALYZER_URL, ANALYZER_MODEL and ANALYZER_API_KEY", metadata: ["provider": "\(model.provider)", "reason": "\(reason)"])
                throw Self.refusedCall
            } catch .blocked(let reason) {
                logger.info("vision model declined", metadata: ["provider": "\(model.provider)", "reason": "\(reason)"])
                var refused = APIError(
                    .unprocessableContent, code: "analysis_refused", detail: "The photo analysis service declined to analyse this photo. Try another photo.")
                // Counted, and a retry with its key is told so again without another call.
                refused.answersRetries = true
                throw refused
            }
            logger.warning("vision model answer unusable", metadata: ["provider": "\(model.provider)", "attempt": "\(attempt)", "problem": "\(lastProblem)"])
        }
        throw APIError(.badGateway, code: "analysis_failed", detail: "The photo analysis service did not give a usable answer; try again.")
    }
}
