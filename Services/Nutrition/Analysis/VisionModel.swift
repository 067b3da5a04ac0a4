import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import ServiceKit

/// What a vision model is asked: the photo (a JPEG at most `MealPhoto.modelLongSide` pixels on its
/// long side) and the prompt; the answer's JSON schema is each provider's own spelling of
/// `ModelAnswer.jsonSchema`.
struct VisionRequest: Sendable {
    var jpeg: ByteBuffer
    var prompt: String
}

/// Why a call gave no answer.
enum VisionFailure: Error, Equatable {
    /// Refused (408, 429), failed (5xx) or unreachable: try again later, after `retryAfter` seconds
    /// when the provider said.
    case unavailable(retryAfter: String?, reason: String)
    /// No answer within the timeout, the request sent: the model may have worked on it all along.
    case timedOut(String)
    /// The provider blocked the photo or the answer (a safety filter, a refusal).
    case blocked(String)
    /// A `200` whose body is not the provider's answer: not JSON at all (a proxy's page), no
    /// candidate or choice, larger than any answer asked for.
    case malformed(String)
    /// The model's answer, but no use: empty (its tokens spent before any text, thoughts among
    /// them), or not the schema's.
    case unusable(String)
    /// The provider refused the call itself (a 4xx other than 408 and 429: a key it does not take, a model
    /// it does not have): the server's settings are wrong, and asking again changes nothing.
    case rejected(String)
}

/// A vision model's API: one call, one answer's JSON text.
protocol VisionModel: Sendable {
    var provider: String { get }
    var model: String { get }
    func answer(_ request: VisionRequest, timeout: Duration) async throws(VisionFailure) -> String
}

/// The HTTP exchange both providers share: a JSON `POST`, its answer read whole, the timeout turned
/// into `timedOut`, 408, 429 and 5xx into `unavailable`, the other refusals into `rejected`.
struct VisionHTTP: Sendable {
    let httpClient: HTTPClient
    /// An answer longer than this is not one this service asked for.
    static let maxAnswerBytes = 4 << 20

    func post(_ url: String, headers: [(String, String)], json: [String: Any], timeout: Duration) async throws(VisionFailure) -> Data {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        do {
            request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: json)))
        } catch {
            throw .rejected("request not encodable: \(error)")
        }
        let started = ContinuousClock.now
        do {
            let response = try await httpClient.execute(request, timeout: .milliseconds(Int64(timeout / .milliseconds(1))))
            let status = Int(response.status.code)
            // A failure is told by its status: its body, which may be slow to end, is not waited for.
            if status == 408 || status == 429 || status >= 500 {
                throw VisionFailure.unavailable(retryAfter: response.headers.first(name: "Retry-After"), reason: "HTTP \(status)")
            }
            let left = timeout - (ContinuousClock.now - started)
            // The body is read within what is left of the same timeout.
            let body = try await withThrowingTaskGroup(of: ByteBuffer?.self) { group in
                group.addTask { try await response.body.collect(upTo: Self.maxAnswerBytes) }
                group.addTask {
                    try await Task.sleep(for: max(left, .zero))
                    return nil
                }
                defer { group.cancelAll() }
                return try await group.next() ?? nil
            }
            guard let body else {
                // Only the model's answer is the model's to take the whole timeout over.
                throw status == 200 ? VisionFailure.timedOut("timed out reading the answer") : VisionFailure.rejected("HTTP \(status), its body not read in time")
            }
            guard status == 200 else { throw VisionFailure.rejected("HTTP \(status): \(String(decoding: body.readableBytesView.prefix(300), as: UTF8.self))") }
            return Data(buffer: body)
        } catch let failure as VisionFailure {
            throw failure
        } catch is NIOTooManyBytesError {
            throw .malformed("an answer over \(Self.maxAnswerBytes) bytes")
        } catch let error as HTTPClientError where error == .deadlineExceeded && timeout > ServiceDependencies.connectTimeout {
            // The connection is made, or fails, within the kit's connect timeout, and never waits
            // for another call's: with more time than that, the provider had the request.
            throw .timedOut("no answer within \(timeout)")
        } catch {
            throw .unavailable(retryAfter: nil, reason: "\(error)")
        }
    }

    static func object(_ data: Data) -> [String: Any]? { (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] }
}

/// Google's Gemini API: `POST {base}/models/{model}:generateContent`, the photo as `inlineData`, the
/// answer held to `generationConfig.responseSchema` with `responseMimeType: application/json`. A
/// prompt blocked is `promptFeedback.blockReason`; an answer stopped by a filter has a
/// `finishReason` of `SAFETY` (or another blocking reason) and no text.
struct GeminiModel: VisionModel {
    let http: VisionHTTP
    let base: String
    let model: String
    let apiKey: String
    /// `generationConfig.maxOutputTokens`, which bounds the thoughts of a thinking model too.
    let maxOutputTokens: Int
    var provider: String { "gemini" }

    static let blockingFinishes: Set<String> = ["SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "RECITATION", "IMAGE_SAFETY"]

    func answer(_ request: VisionRequest, timeout: Duration) async throws(VisionFailure) -> String {
        let body: [String: Any] = [
            "systemInstruction": ["parts": [["text": ModelAnswer.instructions]]],
            "contents": [
                [
                    "role": "user",
                    "parts": [
                        ["text": request.prompt],
                        ["inlineData": ["mimeType": "image/jpeg", "data": Data(buffer: request.jpeg).base64EncodedString()]],
                    ],
                ]
            ],
            "generationConfig": [
                "responseMimeType": "application/json", "responseSchema": ModelAnswer.geminiSchema, "temperature": 0, "maxOutputTokens": maxOutputTokens,
            ],
        ]
        let data = try await http.post("\(base)/models/\(model):generateContent", headers: [("x-goog-api-key", apiKey)], json: body, timeout: timeout)
        guard let answer = VisionHTTP.object(data) else { throw .malformed("not JSON") }
        if let feedback = answer["promptFeedback"] as? [String: Any], let reason = feedback["blockReason"] as? String {
            throw .blocked("prompt blocked: \(reason)")
        }
        guard let candidate = (answer["candidates"] as? [[String: Any]])?.first else { throw .malformed("no candidate") }
        if let finish = candidate["finishReason"] as? String, Self.blockingFinishes.contains(finish) { throw .blocked("answer stopped: \(finish)") }
        let parts = ((candidate["content"] as? [String: Any])?["parts"] as? [[String: Any]]) ?? []
        let text = parts.compactMap { $0["text"] as? String }.joined()
        guard !text.isEmpty else { throw .unusable("no text in the candidate (finish reason \(candidate["finishReason"] as? String ?? "none"))") }
        return text
    }
}

/// The Chat Completions shape: `POST {base}/chat/completions`, the photo as an `image_url` data
/// URL, the answer held to `response_format: {type: "json_schema", json_schema: {strict: true}}`. A
/// refusal is `message.refusal`; a filtered answer, `finish_reason: content_filter`.
struct OpenAIModel: VisionModel {
    let http: VisionHTTP
    let base: String
    let model: String
    let apiKey: String?
    /// `max_completion_tokens`, which bounds a reasoning model's reasoning too.
    let maxOutputTokens: Int
    var provider: String { "openai" }

    func answer(_ request: VisionRequest, timeout: Duration) async throws(VisionFailure) -> String {
        let image = "data:image/jpeg;base64,\(Data(buffer: request.jpeg).base64EncodedString())"
        let body: [String: Any] = [
            "model": model,
            "messages": [
                ["role": "system", "content": ModelAnswer.instructions],
                ["role": "user", "content": [["type": "text", "text": request.prompt], ["type": "image_url", "image_url": ["url": image]]]],
            ],
            "response_format": ["type": "json_schema", "json_schema": ["name": "meal_analysis", "strict": true, "schema": ModelAnswer.jsonSchema]],
            "temperature": 0,
            "max_completion_tokens": maxOutputTokens,
        ]
        let headers = apiKey.map { [("Authorization", "Bearer \($0)")] } ?? []
        let data = try await http.post("\(base)/chat/completions", headers: headers, json: body, timeout: timeout)
        guard let answer = VisionHTTP.object(data) else { throw .malformed("not JSON") }
        guard let choice = (answer["choices"] as? [[String: Any]])?.first, let message = choice["message"] as? [String: Any] else { throw .malformed("no choice") }
        if let refusal = message["refusal"] as? String, !refusal.isEmpty { throw .blocked("refused: \(refusal)") }
        if choice["finish_reason"] as? String == "content_filter" { throw .blocked("answer filtered") }
        guard let text = message["content"] as? String, !text.isEmpty else { throw .unusable("no content (finish reason \(choice["finish_reason"] as? String ?? "none"))") }
        return text
    }
}
