import Foundation
import ServiceKitCore
import Testing

@Suite struct DisplayDateTests {
    /// In words and in UTC, whatever the machine's locale and zone: a mail and a page say the same.
    @Test func aDayIsWrittenInWordsInUTC() {
        #expect(DisplayDate.day(Date(timeIntervalSince1970: 1_795_651_200)) == "26 November 2026")
        // 23:59:59 UTC is still that day; a second later is the next.
        #expect(DisplayDate.day(Date(timeIntervalSince1970: 1_795_737_599)) == "26 November 2026")
        #expect(DisplayDate.day(Date(timeIntervalSince1970: 1_795_737_600)) == "27 November 2026")
        #expect(DisplayDate.day(Date(timeIntervalSince1970: 0)) == "1 January 1970")
    }
}
