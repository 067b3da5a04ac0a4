import Mailer
import ServiceKitCore
import Testing

@Suite struct SMTPSettingsTests {
    /// The URL libcurl is given is one: an IPv6 literal keeps its brackets, and the port defaults by scheme.
    @Test func theSMTPURLIsRebuiltAsAURL() {
        func url(_ text: String) -> String {
            var env = EnvironmentReader(["SMTP_URL": text])
            return SMTPConfig(reading: &env).url
        }
        #expect(url("smtp://[::1]:2525") == "smtp://[::1]:2525")
        #expect(url("smtps://mail.example.com") == "smtps://mail.example.com:465")
        #expect(url("smtp://user:pw@127.0.0.1") == "smtp://127.0.0.1:25")
    }
}
