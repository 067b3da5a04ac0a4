import ServiceKit

/// Which vision model analyses meal photos, and how it is called. Unset `ANALYZER_PROVIDER` turns
/// the analysis off (`POST /v1/meals/analyze` is `503 analyzer_not_configured`); every other route
/// works without it.
struct AnalyzerSettings: Sendable {
    enum Provider: String, Sendable, CaseIterable {
        /// Google's Gemini API, `models/{model}:generateContent`.
        case gemini
        /// The Chat Completions shape (`/chat/completions`): OpenAI, and the servers that speak it
        /// (Ollama, vLLM, llama.cpp's server).
        case openai

        var defaultURL: String {
            switch self {
            case .gemini: "https://generativelanguage.googleapis.com/v1beta"
            case .openai: "https://api.openai.com/v1"
            }
        }

        var defaultModel: String {
            switch self {
            case .gemini: "gemini-2.5-flash"
            case .openai: "gpt-4o-mini"
            }
        }
    }

    /// nil: not configured.
    var provider: Provider?
    /// Sent as `x-goog-api-key` (Gemini) or `Authorization: Bearer` (OpenAI); a self-hosted server
    /// may need none.
    var apiKey: String?
    var model: String
    /// The API's base, up to and including its version: `…/v1beta` for Gemini, `…/v1` for the Chat
    /// Completions shape.
    var url: String
    /// How long one call may take (`ANALYZER_TIMEOUT_MS`, 20 s).
    var timeout: Duration
    /// Calls to the model at once in this process (`ANALYZER_CONCURRENCY`, 8); beyond, `503` at once.
    var concurrency: Int
    /// Calls one user's analyses make at once in this process (`ANALYZER_CONCURRENCY_PER_USER`, 2):
    /// one account cannot take every call slot from the others.
    var concurrencyPerUser: Int
    /// The most tokens one answer may take, a thinking model's thoughts included
    /// (`ANALYZER_MAX_OUTPUT_TOKENS`, 8192): what bounds a call's cost, whatever the hint asks for.
    /// Thirty items of the schema take some two thousand.
    var maxOutputTokens: Int

    init(reading env: inout EnvironmentReader) {
        let name = env.optionalString("ANALYZER_PROVIDER")?.lowercased()
        if let name, Provider(rawValue: name) == nil {
            env.report("ANALYZER_PROVIDER: must be one of \(Provider.allCases.map(\.rawValue).joined(separator: ", ")), or unset, got \"\(name)\"")
        }
        provider = name.flatMap(Provider.init(rawValue:))
        apiKey = env.optionalString("ANALYZER_API_KEY")
        model = env.optionalString("ANALYZER_MODEL") ?? provider?.defaultModel ?? ""
        let base = env.optionalString("ANALYZER_URL") ?? provider?.defaultURL ?? ""
        url = base.hasSuffix("/") ? String(base.dropLast()) : base
        if provider != nil, env.url("ANALYZER_URL", default: url, schemes: ["http", "https"]) == nil { url = "" }
        timeout = env.milliseconds("ANALYZER_TIMEOUT_MS", default: 20_000, range: 100...300_000)
        concurrency = env.int("ANALYZER_CONCURRENCY", default: 8, range: 1...1_024)
        concurrencyPerUser = env.int("ANALYZER_CONCURRENCY_PER_USER", default: 2, range: 1...1_024)
        maxOutputTokens = env.int("ANALYZER_MAX_OUTPUT_TOKENS", default: 8_192, range: 1_024...65_536)
        if provider == .gemini, apiKey == nil { env.report("ANALYZER_API_KEY: is required when ANALYZER_PROVIDER=gemini") }
    }
}
