import ServiceKit

@main
enum SocialMain {
    static func main() async {
        await ServiceLauncher.main(SocialService.definition)
    }
}
