//! Feeds an image registry's lifecycle into a [`Profiler`].

use tcgkit_image_core::{FailedEvent, LifecycleObserver, LoadedImage, LoadingEvent};

use crate::dispatch::{Profiler, UnloadToken};
use crate::event::{Event, ImageEvent, ImageFailed, ImageId, ImageLoading};

/// A [`LifecycleObserver`] that raises the profiler's image events.
///
/// Give it to `ImageRegistry::add_observer`. The registry's image ids become
/// the events' [`ImageId`]s. Between `unloading` and `unloaded` it keeps the
/// profiler's [`UnloadToken`] (the "v2" states and the start time); unloads
/// nest like a stack, so the pending tokens are a stack too.
#[derive(Debug)]
pub struct ImageEventBridge {
    profiler: Profiler,
    pending: Vec<(ImageId, UnloadToken)>,
}

impl ImageEventBridge {
    /// A bridge raising into `profiler`.
    pub fn new(profiler: Profiler) -> ImageEventBridge {
        ImageEventBridge {
            profiler,
            pending: Vec::new(),
        }
    }
}

fn image_event<'a>(image: &LoadedImage<'a>) -> ImageEvent<'a> {
    ImageEvent {
        id: ImageId(image.id().get()),
        image: image.image(),
    }
}

impl LifecycleObserver for ImageEventBridge {
    fn loading(&mut self, event: &LoadingEvent<'_>) {
        self.profiler.raise(Event::ImageLoading(ImageLoading {
            id: ImageId(event.id.get()),
            path: Some(event.path),
            name: event.requested.map(|name| name.name.as_str()),
        }));
    }

    fn loaded(&mut self, image: &LoadedImage<'_>) {
        self.profiler.raise(Event::ImageLoaded(image_event(image)));
    }

    fn failed(&mut self, event: &FailedEvent<'_>) {
        self.profiler.raise(Event::ImageFailed(ImageFailed {
            id: ImageId(event.id.get()),
            path: Some(event.path),
            error: event.error,
        }));
    }

    fn unloading(&mut self, image: &LoadedImage<'_>) {
        let event = image_event(image);
        let token = self.profiler.raise_image_unloading(&event);
        self.pending.push((event.id, token));
    }

    fn unloaded(&mut self, image: &LoadedImage<'_>) {
        let event = image_event(image);
        // The match is the top of the stack when unloads nest (always, with
        // image-core's registry); search anyway rather than trust it.
        let token = match self.pending.iter().rposition(|(id, _)| *id == event.id) {
            Some(index) => self.pending.remove(index).1,
            None => UnloadToken::unobserved(),
        };
        self.profiler.raise_image_unloaded(token, &event);
    }
}
